//! The GPU path, found at run time: the CUDA driver and NVRTC through
//! cudarc's dynamic loading, nvJPEG through `stoker_cuda::nvjpeg`. Nothing CUDA is
//! needed to build or run the binary; [`probe`] says whether this host can
//! use a GPU and, if not, exactly what is missing.
//!
//! - [`Gpu`]: a device's context, stream and compiled kernels.
//! - `decode`: batched nvJPEG decode to device RGB, per-image errors for
//!   JPEGs the GPU path cannot take (the caller routes them to the CPU).
//! - [`Gpu::resized_crop_flip`]: the fused crop + resize + flip kernel of
//!   `stoker-cuda` over a batch, driven by the steps of each sample's
//!   plan (`stoker_image::SamplePlan`, made where the worker routes it),
//!   reading through a chain of nearest steps (`chain`);
//!   [`Gpu::run_steps_batch`]: any other step lists, in rounds over the
//!   batch (chains, crop-resizes, colour steps in `color`, filtered warps).
//! - `runner` ([`GpuRunner`]): the worker's GPU lanes, which use both.
//!
//! Every device buffer and launch goes through `stoker-cuda`'s safe
//! types and functions ([`DeviceImage`], `Kernels`' batch launches,
//! `nvjpeg::Decoder`): this module holds no `unsafe` (the crate forbids
//! it) and never handles a device address.
//!
//! The submodules are private (the crate warns on `unreachable_pub`); this
//! module re-exports what the CLI and the tests use.

mod batch;
mod chain;
mod color;
mod decode;
mod device;
mod lane;
mod lend;
mod plan;
mod queue;
mod resample;
mod runner;
mod steal;
mod steps;

pub use decode::{DecodePath, GpuDecodeError, GpuDecoder};
pub use device::{Gpu, GpuError, GpuInfo, GpuUnavailable, POOL_KEEP_BYTES, probe};
pub use lane::{DEFAULT_BATCH_MEMORY, DEFAULT_LANES, DEFAULT_MAX_BATCH, GpuRunnerConfig};
pub use queue::{GpuResult, GpuSample, MaskPixels, Recipe, RunnerGone};
pub use runner::{GpuMemory, GpuRunner};
pub use steps::{GpuCrop, fused, gpu_runs, mask_chain};
pub use stoker_cuda::nvjpeg::Backend;
pub use stoker_cuda::{Confinement, DeviceImage, SmShare};

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_core::{Interpolation, Rect, Step};
    use stoker_core::{SampleRng, TransformSpec, resolve_steps};

    #[test]
    fn train_steps_map_to_a_gpu_crop() {
        let spec = TransformSpec::train(224);
        let mut flips = 0;
        for i in 0..200 {
            let steps = resolve_steps(&spec, &SampleRng::for_sample(3, 1, "s", i), 500, 375).unwrap();
            let crop = GpuCrop::from_steps(&steps, 500, 375, 224).expect("train steps fit the kernel");
            assert!(!crop.pad && crop.rect.inside(500, 375), "{crop:?}");
            flips += usize::from(crop.flip);
        }
        assert!((50..150).contains(&flips), "{flips} flips of 200");
    }

    #[test]
    fn other_steps_are_not_fused() {
        let spec = TransformSpec::eval(224);
        let steps = resolve_steps(&spec, &SampleRng::for_sample(3, 1, "s", 0), 500, 375).unwrap();
        assert_eq!(GpuCrop::from_steps(&steps, 500, 375, 224), None);
        assert_eq!(GpuCrop::from_steps(&[], 500, 375, 224), None);
        let outside = [Step::CropResize {
            crop: Rect::new(-1, 0, 100, 100),
            out_w: 224,
            out_h: 224,
            filter: Interpolation::Bilinear,
        }];
        let padded = GpuCrop::from_steps(&outside, 500, 375, 224).expect("a padded box is fused");
        assert!(padded.pad && !padded.flip);
        let inside = GpuCrop::from_steps(&[outside[0].clone(), Step::FlipHorizontal], 50, 375, 224);
        assert!(inside.is_some_and(|c| c.pad && c.flip));
        let rotated = [outside[0].clone(), Step::Equalize];
        assert_eq!(GpuCrop::from_steps(&rotated, 500, 375, 224), None);
        let Step::CropResize { crop, .. } = outside[0] else {
            unreachable!()
        };
        let bicubic = [Step::CropResize {
            crop,
            out_w: 224,
            out_h: 224,
            filter: Interpolation::Bicubic,
        }];
        assert_eq!(GpuCrop::from_steps(&bicubic, 500, 375, 224), None);
    }

    #[test]
    fn the_gpu_runs_the_steps_it_has_kernels_for() {
        let steps = |json: &str| {
            let spec = TransformSpec::from_json(json).unwrap();
            resolve_steps(&spec, &SampleRng::for_sample(3, 1, "s", 0), 500, 375).unwrap()
        };
        let gpu = steps(
            r#"{"ops": [{"op": "RandomRotation", "degrees": [20, 20], "expand": true},
                {"op": "ColorJitter", "brightness": 0.4, "contrast": 0.4, "saturation": 0.4},
                {"op": "RandomGrayscale", "p": 1.0}, {"op": "GaussianBlur", "kernel_size": 5},
                {"op": "RandomResizedCrop", "size": 64}, {"op": "RandomVerticalFlip", "p": 1.0}]}"#,
        );
        assert!(gpu.iter().all(gpu_runs), "{gpu:?}");
        // Bilinear warps, hue, table ops, pads of any mode, erasing.
        for json in [
            r#"{"ops": [{"op": "RandomRotation", "degrees": 10, "interpolation": "bilinear"}, {"op": "CenterCrop", "size": 64}]}"#,
            r#"{"ops": [{"op": "ColorJitter", "hue": [0.1, 0.1]}, {"op": "CenterCrop", "size": 64}]}"#,
            r#"{"ops": [{"op": "RandomEqualize", "p": 1.0}, {"op": "CenterCrop", "size": 64}]}"#,
            r#"{"ops": [{"op": "Pad", "padding": 3, "padding_mode": "symmetric"}, {"op": "RandomErasing", "p": 1.0}, {"op": "CenterCrop", "size": 64}]}"#,
        ] {
            assert!(steps(json).iter().all(gpu_runs), "{json}");
        }
        // Resizes with Pillow's other filters too; a non-square blur runs
        // on the CPU.
        for filter in ["bicubic", "lanczos", "box", "hamming"] {
            let json =
                format!(r#"{{"ops": [{{"op": "RandomResizedCrop", "size": 64, "interpolation": "{filter}"}}]}}"#);
            assert!(steps(&json).iter().all(gpu_runs), "{json}");
        }
        let blur = r#"{"ops": [{"op": "GaussianBlur", "kernel_size": [3, 5]}, {"op": "CenterCrop", "size": 64}]}"#;
        assert!(!steps(blur).iter().all(gpu_runs), "{blur}");
    }

    #[test]
    fn probe_names_what_is_missing_or_describes_the_gpu() {
        match probe() {
            Ok(info) => {
                let line = info.to_string();
                assert!(line.contains("sm_") && line.contains("jpeg decoder"), "{line}");
                println!("gpu found: {line}");
            }
            Err(reason) => {
                let text = reason.to_string();
                assert!(text.starts_with("no ") || text.contains("fail"), "{text}");
                println!("skipped: {text}");
            }
        }
    }
}
