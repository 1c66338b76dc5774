//! One example pipeline per op of the registry, with random ranges, so
//! that harnesses that iterate the registry (the CPU-GPU parity test, the
//! footprint test, the benchmarks) cover an op the day it lands: a unit
//! test fails while an op has no example here. `SIZE` stands for the
//! output side ([`example_spec`]).

/// (op name, the ops of a pipeline that uses it, ending at `SIZE`).
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "Compose",
        r#"{"op": "Compose", "transforms": [{"op": "RandomHorizontalFlip"}, {"op": "CenterCrop", "size": SIZE}]}"#,
    ),
    (
        "RandomApply",
        r#"{"op": "RandomApply", "p": 0.5, "transforms": [{"op": "RandomRotation", "degrees": 20}]}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomChoice",
        r#"{"op": "RandomChoice", "transforms": [{"op": "RandomVerticalFlip", "p": 1.0}, {"op": "RandomGrayscale", "p": 1.0}]}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomOrder",
        r#"{"op": "RandomOrder", "transforms": [{"op": "ColorJitter", "brightness": 0.5}, {"op": "RandomHorizontalFlip"}]}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    ("RandomResizedCrop", r#"{"op": "RandomResizedCrop", "size": SIZE}"#),
    ("Resize", r#"{"op": "Resize", "size": [SIZE, SIZE]}"#),
    ("CenterCrop", r#"{"op": "CenterCrop", "size": SIZE}"#),
    (
        "RandomCrop",
        r#"{"op": "RandomCrop", "size": SIZE, "padding": 8, "pad_if_needed": true}"#,
    ),
    (
        "Pad",
        r#"{"op": "Pad", "padding": [3, 5], "padding_mode": "reflect"}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomZoomOut",
        r#"{"op": "RandomZoomOut", "fill": [123, 117, 104], "side_range": [1.0, 2.0], "p": 0.8}, {"op": "Resize", "size": [SIZE, SIZE]}"#,
    ),
    // Without a targets field (as these run) it sees no boxes and crops
    // nothing; its crop is a plain crop, which every executor runs.
    (
        "RandomIoUCrop",
        r#"{"op": "RandomIoUCrop", "min_scale": 0.5, "trials": 10}, {"op": "Resize", "size": [SIZE, SIZE]}"#,
    ),
    (
        "ScaleJitter",
        r#"{"op": "ScaleJitter", "target_size": [SIZE, SIZE], "scale_range": [0.5, 1.5]}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomShortestSize",
        r#"{"op": "RandomShortestSize", "min_size": [SIZE, 64, 80], "max_size": 120}, {"op": "RandomCrop", "size": SIZE, "pad_if_needed": true}"#,
    ),
    (
        "FixedSizeCrop",
        r#"{"op": "ScaleJitter", "target_size": [SIZE, SIZE]}, {"op": "FixedSizeCrop", "size": SIZE, "fill": [123, 117, 104]}"#,
    ),
    (
        "RandomHorizontalFlip",
        r#"{"op": "RandomHorizontalFlip"}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomVerticalFlip",
        r#"{"op": "RandomVerticalFlip"}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomRotation",
        r#"{"op": "RandomRotation", "degrees": 30, "expand": true, "fill": [10, 200, 30]}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomAffine",
        r#"{"op": "RandomAffine", "degrees": 15, "translate": [0.1, 0.1], "scale": [0.8, 1.2], "shear": 10}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "ColorJitter",
        r#"{"op": "ColorJitter", "brightness": 0.4, "contrast": 0.4, "saturation": 0.4}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "Grayscale",
        r#"{"op": "Grayscale", "num_output_channels": 3}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomGrayscale",
        r#"{"op": "RandomGrayscale", "p": 0.5}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomSolarize",
        r#"{"op": "RandomSolarize", "threshold": 128}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomPosterize",
        r#"{"op": "RandomPosterize", "bits": 3}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomEqualize",
        r#"{"op": "RandomEqualize"}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomAutocontrast",
        r#"{"op": "RandomAutocontrast"}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomAdjustSharpness",
        r#"{"op": "RandomAdjustSharpness", "sharpness_factor": 2.0}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomInvert",
        r#"{"op": "RandomInvert"}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomPhotometricDistort",
        r#"{"op": "RandomPhotometricDistort"}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "RandomChannelPermutation",
        r#"{"op": "RandomChannelPermutation"}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "GaussianBlur",
        r#"{"op": "CenterCrop", "size": SIZE}, {"op": "GaussianBlur", "kernel_size": 5}"#,
    ),
    (
        "AutoAugment",
        r#"{"op": "CenterCrop", "size": SIZE}, {"op": "AutoAugment"}"#,
    ),
    (
        "RandAugment",
        r#"{"op": "CenterCrop", "size": SIZE}, {"op": "RandAugment"}"#,
    ),
    (
        "TrivialAugmentWide",
        r#"{"op": "CenterCrop", "size": SIZE}, {"op": "TrivialAugmentWide"}"#,
    ),
    (
        "TimmRandAugment",
        r#"{"op": "CenterCrop", "size": SIZE}, {"op": "TimmRandAugment", "config": "rand-m9-mstd0.5-inc1"}"#,
    ),
    (
        "RandomErasing",
        r#"{"op": "CenterCrop", "size": SIZE}, {"op": "ToDtype", "dtype": "float32", "scale": true}, {"op": "Normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}, {"op": "RandomErasing", "p": 1.0}"#,
    ),
    (
        "ClampBoundingBoxes",
        r#"{"op": "RandomAffine", "degrees": 20}, {"op": "ClampBoundingBoxes"}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    (
        "SanitizeBoundingBoxes",
        r#"{"op": "RandomResizedCrop", "size": SIZE}, {"op": "ToDtype", "dtype": "float32", "scale": true}, {"op": "SanitizeBoundingBoxes"}"#,
    ),
    (
        "ConvertBoundingBoxFormat",
        r#"{"op": "ConvertBoundingBoxFormat", "format": "CXCYWH"}, {"op": "CenterCrop", "size": SIZE}"#,
    ),
    ("ToImage", r#"{"op": "CenterCrop", "size": SIZE}, {"op": "ToImage"}"#),
    (
        "ToPureTensor",
        r#"{"op": "CenterCrop", "size": SIZE}, {"op": "ToImage"}, {"op": "ToPureTensor"}"#,
    ),
    (
        "PILToTensor",
        r#"{"op": "CenterCrop", "size": SIZE}, {"op": "PILToTensor"}"#,
    ),
    ("ToTensor", r#"{"op": "CenterCrop", "size": SIZE}, {"op": "ToTensor"}"#),
    (
        "ToDtype",
        r#"{"op": "CenterCrop", "size": SIZE}, {"op": "ToDtype", "dtype": "bfloat16", "scale": true}"#,
    ),
    (
        "ConvertImageDtype",
        r#"{"op": "CenterCrop", "size": SIZE}, {"op": "ConvertImageDtype", "dtype": "float32"}"#,
    ),
    (
        "Normalize",
        r#"{"op": "CenterCrop", "size": SIZE}, {"op": "ToTensor"}, {"op": "Normalize", "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}"#,
    ),
];

/// The JSON spec of an example's ops at output side `size`.
pub fn example_spec(ops: &str, size: u32) -> String {
    format!(
        r#"{{"version": 1, "ops": [{}]}}"#,
        ops.replace("SIZE", &size.to_string())
    )
}
