use super::*;

fn err(json: &str) -> String {
    TransformSpec::from_json(json).unwrap_err().to_string()
}

#[test]
fn presets_validate() {
    assert!(TransformSpec::preset("train", 224).is_ok());
    let eval = TransformSpec::preset("eval", 224).unwrap();
    assert_eq!(eval.ops[0], Resize::shorter(256).into());
    assert_eq!(
        TransformSpec::parse("train", None).unwrap().size,
        ImageSize::Square(224)
    );
    assert_eq!(TransformSpec::preset("train", 0), Err(SpecError::Size(0)));
    assert_eq!(TransformSpec::preset("train", 100_000), Err(SpecError::Size(100_000)));
    assert!(matches!(
        TransformSpec::preset("fancy", 224),
        Err(SpecError::UnknownPreset(_))
    ));
}

#[test]
fn every_registered_op_has_an_example() {
    for name in OP_NAMES {
        assert!(
            EXAMPLES.iter().any(|(op, _)| op == name),
            "{name} has no example in transform/examples.rs"
        );
    }
    for (op, ops) in EXAMPLES {
        let spec = TransformSpec::from_json(&example_spec(ops, 32)).unwrap_or_else(|e| panic!("{op}: {e}"));
        assert_eq!(spec.size, ImageSize::Square(32), "{op}");
    }
}

#[test]
fn json_round_trips_with_defaults_filled_in() {
    let spec = TransformSpec::from_json(
        r#"{"version": 1, "ops": [{"op": "RandomResizedCrop", "size": 176, "antialias": true},
            {"op": "RandomHorizontalFlip"}, {"op": "TrivialAugmentWide", "interpolation": "bilinear"},
            {"op": "PILToTensor"}, {"op": "ToDtype", "dtype": "float32", "scale": true},
            {"op": "Normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
            {"op": "RandomErasing", "p": 0.1}]}"#,
    )
    .unwrap();
    assert_eq!(spec.size, ImageSize::Square(176));
    let json = spec.to_json();
    assert!(
        json.contains(r#""scale":[0.08,1.0]"#) && json.contains(r#""version":1"#),
        "{json}"
    );
    assert_eq!(TransformSpec::from_json(&json).unwrap(), spec);
    let out = spec.output();
    assert_eq!(out.dtype.as_deref(), Some("float32"));
    assert_eq!(out.mean_std.unwrap().0, [0.485, 0.456, 0.406]);
    let built = TransformSpec::builder()
        .then(RandomResizedCrop::new(64))
        .then(RandomHorizontalFlip::default())
        .build()
        .unwrap();
    assert_eq!(built, TransformSpec::train(64));
}

#[test]
fn errors_name_the_op_its_position_and_the_argument() {
    let e = err(r#"{"ops": [{"op": "CenterCrop", "size": 8}, {"op": "Lambda"}]}"#);
    assert!(
        e.contains("ops[1]") && e.contains("Lambda") && e.contains("RandomResizedCrop"),
        "{e}"
    );
    let e = err(r#"{"ops": [{"op": "RandomRotation", "degrees": 10, "bogus": 1}, {"op": "CenterCrop", "size": 8}]}"#);
    assert!(
        e.contains("ops[0]") && e.contains("bogus") && e.contains("RandomRotation"),
        "{e}"
    );
    let e = err(r#"{"ops": [{"op": "RandomRotation", "degrees": -10}, {"op": "CenterCrop", "size": 8}]}"#);
    assert!(
        e.contains("ops[0] (RandomRotation)") && e.contains("degrees -10"),
        "{e}"
    );
    let e = err(
        r#"{"ops": [{"op": "RandomApply", "transforms": [{"op": "GaussianBlur", "kernel_size": 4}]}, {"op": "CenterCrop", "size": 8}]}"#,
    );
    assert!(
        e.contains("transforms[0] (GaussianBlur)") && e.contains("kernel_size 4"),
        "{e}"
    );
    let e = err(r#"{"ops": [{"op": "ColorJitter", "hue": 0.7}, {"op": "CenterCrop", "size": 8}]}"#);
    assert!(e.contains("hue"), "{e}");
    let e = err(r#"{"version": 2, "ops": [{"op": "CenterCrop", "size": 8}]}"#);
    assert!(e.contains("version 2") && e.contains("version 1"), "{e}");
}

#[test]
fn pipelines_without_a_fixed_square_output_keep_each_images_size() {
    let size = |json: &str| TransformSpec::from_json(json).map(|s| s.size);
    assert_eq!(size(r#"{"ops": [{"op": "Resize", "size": 256}]}"#), Ok(ImageSize::Each));
    assert_eq!(
        size(r#"{"ops": [{"op": "CenterCrop", "size": 8}, {"op": "Resize", "size": 30}]}"#),
        Ok(ImageSize::Square(30)),
        "a resize of a fixed size is fixed"
    );
    assert_eq!(
        size(r#"{"ops": [{"op": "CenterCrop", "size": [8, 6]}]}"#),
        Ok(ImageSize::Each),
        "a fixed rectangle is served as each image's size"
    );
    assert_eq!(
        size(r#"{"ops": [{"op": "CenterCrop", "size": 8}, {"op": "RandomRotation", "degrees": 5, "expand": true}]}"#),
        Ok(ImageSize::Each)
    );
    assert_eq!(
        size(
            r#"{"ops": [{"op": "CenterCrop", "size": 8}, {"op": "RandomApply", "transforms": [{"op": "Pad", "padding": 2}]}]}"#
        ),
        Ok(ImageSize::Each)
    );
    assert_eq!(
        size(r#"{"ops": [{"op": "RandomHorizontalFlip"}]}"#),
        Ok(ImageSize::Each)
    );
    // A size asked for must be where the spec ends.
    let e = TransformSpec::parse(r#"{"ops": [{"op": "RandomHorizontalFlip"}]}"#, Some(64)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "transform ends at each image's own size, but 64x64 was asked for"
    );
    assert_eq!(TransformSpec::from_json(r#"{"ops": []}"#), Err(SpecError::Empty));
}

#[test]
fn output_ops_come_last_in_an_order_torchvision_accepts() {
    let e = err(r#"{"ops": [{"op": "CenterCrop", "size": 8}, {"op": "Normalize", "mean": [0.5], "std": [0.5]}]}"#);
    assert!(e.contains("needs float input"), "{e}");
    let e = err(r#"{"ops": [{"op": "CenterCrop", "size": 8}, {"op": "ToDtype", "dtype": "float32"}]}"#);
    assert!(e.contains("scale=True"), "{e}");
    let e = err(r#"{"ops": [{"op": "ToTensor"}, {"op": "CenterCrop", "size": 8}]}"#);
    assert!(
        e.contains("ops[1] (CenterCrop)") && e.contains("after the output conversion"),
        "{e}"
    );
    let e =
        err(r#"{"ops": [{"op": "CenterCrop", "size": 8}, {"op": "RandomApply", "transforms": [{"op": "ToTensor"}]}]}"#);
    assert!(e.contains("must come last"), "{e}");
    let e = err(r#"{"ops": [{"op": "CenterCrop", "size": 8}, {"op": "Grayscale"}]}"#);
    assert!(e.contains("num_output_channels=1"), "{e}");
}

#[test]
fn erasing_after_normalize_fills_the_mean_colour() {
    let spec = TransformSpec::from_json(
        r#"{"ops": [{"op": "CenterCrop", "size": 64}, {"op": "ToTensor"},
            {"op": "Normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
            {"op": "RandomErasing", "p": 1.0}]}"#,
    )
    .unwrap();
    let steps = crate::resolve_steps(&spec, &crate::SampleRng::for_sample(0, 0, "s", 3), 64, 64).unwrap();
    let Some(crate::Step::Erase {
        fill: crate::EraseFill::Color(rgb),
        ..
    }) = steps.last()
    else {
        panic!("{steps:?}");
    };
    assert_eq!(*rgb, [124, 116, 104]);
}

#[test]
fn broken_json_and_a_wrong_shape_are_told_apart() {
    let broken = err(r#"{"ops": ["#);
    assert!(broken.contains("not valid JSON"), "{broken}");
    let unknown = err(r#"{"ops": [{"op": "RandomResizedCrop", "size": 64, "bogus": 1}]}"#);
    assert!(
        !unknown.contains("not valid JSON") && unknown.contains("unknown field `bogus`") && unknown.contains("ops[0]"),
        "{unknown}"
    );
}
