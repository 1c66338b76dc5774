//! A sample's requested fields read as their kinds, as the sample is read
//! (before its image is decoded): a sample whose field is missing or not
//! its kind is skipped then, naming the field, and never decoded.
//!
//! The item keeps the fields by position and attaches them to the
//! sample's result, so the CPU pool and the GPU lanes see only images. A
//! mask is the exception: its bytes go on with the sample, to `cpu.rs`
//! (`process_sample_with`) or, on a `--gpu-only` worker, to the lanes,
//! which run its steps as one chain (see `route.rs`).

use stoker_core::field::one;
use stoker_core::{FieldKind, FieldSpec, FieldValue, Fields};

use super::cpu::Instances;
use super::{SkipKind, Skipped};
use stoker_formats::sample::{MemberProblem, RawField, RawSample, RawValue};
use stoker_image::SamplePlan;

/// Reads `raw`'s fields (taken out of it) as `specs` ask. `Err` is the
/// sample's skip: a required field missing (`missing_field`), over the
/// size limit (`too_large`), or not its kind (`bad_field`).
///
/// A mask is transformed with its image, later: its value here is `None`,
/// and its bytes go back into `raw.fields` at its index (every other
/// index `Ok(None)`) for [`super::cpu::process_sample_with`].
pub(super) fn read_fields(specs: &[FieldSpec], raw: &mut RawSample) -> Result<Fields, Skipped> {
    let stored = std::mem::take(&mut raw.fields);
    let mut masks: Vec<RawField> = Vec::new();
    let skip = |kind: SkipKind, reason: String| Skipped {
        key: raw.key.clone(),
        position: raw.position,
        reason,
        kind,
    };
    let mut out = Vec::with_capacity(specs.len());
    // A reader asked for fewer (none, for a record it could not parse)
    // leaves the rest missing.
    let mut stored = stored.into_iter();
    for spec in specs {
        let field: RawField = stored.next().unwrap_or(Ok(None));
        let value = match field {
            Ok(Some(value)) => value,
            Ok(None) if spec.optional => {
                out.push(None);
                continue;
            }
            Ok(None) => {
                return Err(skip(
                    SkipKind::MissingField,
                    format!("missing field {:?}: the sample has no {}", spec.name, spec.source),
                ));
            }
            Err(problem @ MemberProblem::TooLarge { .. }) => {
                return Err(skip(SkipKind::TooLarge, format!("field {:?}: {problem}", spec.name)));
            }
            Err(problem) => return Err(skip(SkipKind::BadField, format!("field {:?}: {problem}", spec.name))),
        };
        if spec.kind == FieldKind::Mask {
            let bytes = match value {
                RawValue::Bytes(b) | RawValue::Str(b) => b,
                other => {
                    return Err(skip(
                        SkipKind::BadField,
                        format!("mask {:?}: a stored {} is not an image", spec.name, stored_name(&other)),
                    ));
                }
            };
            masks.resize(out.len(), Ok(None));
            masks.push(Ok(Some(RawValue::Bytes(bytes))));
            out.push(None);
            continue;
        }
        let value = as_kind(spec.kind, value).map_err(|why| {
            skip(
                SkipKind::BadField,
                format!("field {:?} ({} from {}): {why}", spec.name, spec.kind, spec.source),
            )
        })?;
        out.push(Some(value));
    }
    if !masks.is_empty() {
        masks.resize(out.len(), Ok(None));
        raw.fields = masks;
    }
    Ok(out)
}

/// The most bytes one sample's instance masks may take (a plane of the
/// output size per instance): a chunk of one sample must fit in a
/// response (`MAX_RESPONSE_BYTES`, 256 MiB). COCO's most crowded image
/// takes 28 MB at 640x480.
pub(crate) const MAX_MASK_BYTES: u64 = 128 << 20;

/// Places each detection-targets field of `fields` on the planned image
/// and moves it through the image's geometry (the plan's target steps,
/// from the same draws as its pixels), on the host, whichever executor
/// then runs the pixels. `Err` is the sample's skip: a box or outline
/// outside its image (`bad_field`), naming the field and the instance, or
/// masks over [`MAX_MASK_BYTES`] (`too_large`).
pub(super) fn place_targets(
    specs: &[FieldSpec],
    fields: &mut Fields,
    plan: &SamplePlan,
    raw: &RawSample,
) -> Result<(), Skipped> {
    for (spec, value) in specs.iter().zip(fields.iter_mut()) {
        if let Some(FieldValue::Targets(t)) = value {
            t.place(plan.dims).map_err(|e| Skipped {
                key: raw.key.clone(),
                position: raw.position,
                reason: format!("field {:?} ({}x{} image): {e}", spec.name, plan.dims.0, plan.dims.1),
                kind: SkipKind::BadField,
            })?;
            t.follow(&plan.targets);
            let (w, h) = plan.out_dims();
            let bytes = t.mask_bytes((w, h));
            if bytes > MAX_MASK_BYTES {
                return Err(Skipped {
                    key: raw.key.clone(),
                    position: raw.position,
                    reason: format!(
                        "field {:?}: the masks of {} instances at {w}x{h} take {bytes} bytes, over the {MAX_MASK_BYTES} one sample's may take",
                        spec.name,
                        t.outlines.len()
                    ),
                    kind: SkipKind::TooLarge,
                });
            }
        }
    }
    Ok(())
}

/// The memory `fields`' instance masks take while the pool draws them:
/// their planes at the output size, and the canvas they are drawn on.
pub(super) fn mask_need(fields: &Fields, plan: &SamplePlan) -> u64 {
    let planes: u64 = fields
        .iter()
        .flatten()
        .map(|v| match v {
            FieldValue::Targets(t) => t.mask_bytes(plan.out_dims()),
            _ => 0,
        })
        .sum();
    match planes {
        0 => 0,
        n => n + u64::from(plan.dims.0) * u64::from(plan.dims.1) * 3,
    }
}

/// Takes the targets whose masks the CPU pool draws out of `fields`, by
/// index (their slots left empty until the pool hands them back, drawn).
pub(super) fn take_instances(specs: &[FieldSpec], fields: &mut Fields) -> Instances {
    let mut out = Instances::new();
    for (i, (spec, slot)) in specs.iter().zip(fields.iter_mut()).enumerate() {
        if spec.kind == FieldKind::TargetsWithMasks
            && let Some(FieldValue::Targets(t)) = slot.take_if(|v| matches!(v, FieldValue::Targets(_)))
        {
            out.push((i, t));
        }
    }
    out
}

/// A stored value read as `kind`, or why it is not one: bytes as core
/// reads them ([`FieldValue::from_bytes`]), typed values (TFRecord lists,
/// Parquet cells) as their type allows.
fn as_kind(kind: FieldKind, value: RawValue) -> Result<FieldValue, String> {
    use RawValue as R;
    Ok(match (kind, value) {
        // A string column read as stored is text.
        (FieldKind::Auto, R::Str(b)) => FieldValue::from_bytes(FieldKind::Text, b)?,
        (kind, R::Bytes(b) | R::Str(b)) => FieldValue::from_bytes(kind, b)?,
        (FieldKind::Auto, R::Int(i)) => FieldValue::Int(i),
        (FieldKind::Auto, R::Float(f)) => FieldValue::Float(f),
        (FieldKind::Auto | FieldKind::IntList, R::Ints(v)) => FieldValue::IntList(v),
        (FieldKind::Auto | FieldKind::FloatList, R::Floats(v)) => FieldValue::FloatList(v),
        (_, R::BytesList(list)) => {
            return Err(format!("{} byte strings stored where one was expected", list.len()));
        }
        (FieldKind::Int, v) => FieldValue::Int(one(ints(v)?)?),
        (FieldKind::IntList, v) => FieldValue::IntList(ints(v)?),
        (FieldKind::Float, v) => FieldValue::Float(one(floats(v)?)?),
        (FieldKind::FloatList, v) => FieldValue::FloatList(floats(v)?),
        (kind, v) => return Err(format!("a stored {} is not {kind}", stored_name(&v))),
    })
}

fn stored_name(v: &RawValue) -> &'static str {
    match v {
        RawValue::Bytes(_) => "bytes value",
        RawValue::Str(_) => "string",
        RawValue::BytesList(_) => "bytes list",
        RawValue::Int(_) => "integer",
        RawValue::Float(_) => "number",
        RawValue::Ints(_) => "integer list",
        RawValue::Floats(_) => "number list",
    }
}

fn ints(v: RawValue) -> Result<Vec<i64>, String> {
    match v {
        RawValue::Int(i) => Ok(vec![i]),
        RawValue::Ints(v) => Ok(v),
        other => Err(format!("a stored {} is not integers", stored_name(&other))),
    }
}

fn floats(v: RawValue) -> Result<Vec<f64>, String> {
    match v {
        RawValue::Float(f) => Ok(vec![f]),
        RawValue::Int(i) => Ok(vec![i as f64]),
        RawValue::Floats(v) => Ok(v),
        RawValue::Ints(v) => Ok(v.into_iter().map(|i| i as f64).collect()),
        other => Err(format!("a stored {} is not numbers", stored_name(&other))),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use stoker_formats::image::ImageKind;

    fn raw(fields: Vec<RawField>) -> RawSample {
        RawSample {
            key: "k".into(),
            position: 4,
            image: Ok((ImageKind::Jpeg, Bytes::from_static(b"\xff\xd8"))),
            label: Ok(1),
            fields,
        }
    }

    fn bytes(s: &'static [u8]) -> RawField {
        Ok(Some(RawValue::Bytes(Bytes::from_static(s))))
    }

    #[test]
    fn kinds_from_webdataset_members() {
        let specs = [
            FieldSpec::new("caption", "txt", FieldKind::Text),
            FieldSpec::new("meta", "json", FieldKind::Json),
            FieldSpec::new("n", "cls", FieldKind::Int),
            FieldSpec::new("labels", "labels", FieldKind::IntList),
            FieldSpec::new("box", "box", FieldKind::FloatList),
        ];
        let got = read_fields(
            &specs,
            &mut raw(vec![
                bytes("a cat".as_bytes()),
                bytes(br#"{"w": 3}"#),
                bytes(b" 7\n"),
                bytes(b"[1, 5, 9]"),
                bytes(b"0.5 0.25"),
            ]),
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                Some(FieldValue::Text("a cat".into())),
                Some(FieldValue::Json(r#"{"w": 3}"#.into())),
                Some(FieldValue::Int(7)),
                Some(FieldValue::IntList(vec![1, 5, 9])),
                Some(FieldValue::FloatList(vec![0.5, 0.25])),
            ]
        );
    }

    #[test]
    fn bad_and_missing_fields_skip_naming_the_field() {
        let caption = [FieldSpec::new("caption", "txt", FieldKind::Text)];
        let err = read_fields(&caption, &mut raw(vec![bytes(b"\xff\xfe")])).unwrap_err();
        assert_eq!(err.kind, SkipKind::BadField);
        assert!(
            err.reason.contains("\"caption\"") && err.reason.contains("UTF-8"),
            "{}",
            err.reason
        );
        let meta = [FieldSpec::new("meta", "json", FieldKind::Json)];
        let err = read_fields(&meta, &mut raw(vec![bytes(b"{\"a\": ")])).unwrap_err();
        assert_eq!(err.kind, SkipKind::BadField);
        assert!(err.reason.contains("not JSON"), "{}", err.reason);
        let err = read_fields(&caption, &mut raw(vec![Ok(None)])).unwrap_err();
        assert_eq!(err.kind, SkipKind::MissingField);
        assert!(err.reason.contains("\"caption\""), "{}", err.reason);
        let optional = [FieldSpec {
            optional: true,
            ..caption[0].clone()
        }];
        assert_eq!(read_fields(&optional, &mut raw(vec![Ok(None)])).unwrap(), vec![None]);
        let big = Err(MemberProblem::TooLarge {
            ext: "txt".into(),
            size: 10,
            limit: 5,
        });
        assert_eq!(
            read_fields(&caption, &mut raw(vec![big])).unwrap_err().kind,
            SkipKind::TooLarge
        );
    }

    /// Targets with masks need each instance's segmentation, and a bad
    /// one skips the sample naming the field and the instance; without
    /// masks, segmentations are not read.
    #[test]
    fn instance_outlines_are_read_only_when_masks_are_asked_for() {
        let masks = [FieldSpec::new("targets", "json", FieldKind::TargetsWithMasks)];
        let plain = [FieldSpec::new("targets", "json", FieldKind::Targets)];
        let doc = |seg: &str| -> RawField {
            let json = format!(r#"{{"boxes": [[1, 1, 4, 4], [0, 0, 2, 2]], "segmentation": {seg}}}"#);
            Ok(Some(RawValue::Bytes(Bytes::from(json))))
        };
        let good = r#"[[[1, 1, 4, 1, 4, 4]], {"counts": [0, 4, 32], "size": [6, 6]}]"#;
        let Some(FieldValue::Targets(t)) = read_fields(&masks, &mut raw(vec![doc(good)])).unwrap().remove(0) else {
            panic!("no targets");
        };
        assert_eq!(t.outlines.len(), 2);
        let bad = r#"[[[1, 1, 4, 1, 4, 4]], [[1, 1, 2, 2]]]"#;
        let err = read_fields(&masks, &mut raw(vec![doc(bad)])).unwrap_err();
        assert_eq!(err.kind, SkipKind::BadField);
        assert!(
            err.reason.starts_with(
                "field \"targets\" (targets_with_masks from json): segmentation of instance 1: polygon 0 has 2 points"
            ),
            "{}",
            err.reason
        );
        let err = read_fields(&masks, &mut raw(vec![doc("[[[1, 1, 4, 1, 4, 4]]]")])).unwrap_err();
        assert!(
            err.reason.ends_with("segmentation has 1 values for 2 boxes"),
            "{}",
            err.reason
        );
        let Some(FieldValue::Targets(t)) = read_fields(&plain, &mut raw(vec![doc(bad)])).unwrap().remove(0) else {
            panic!("no targets");
        };
        assert!(t.outlines.is_empty() && t.masks.is_none());
    }

    /// Masks are reserved for (their planes and the canvas they are drawn
    /// on), and a sample whose masks would take over [`MAX_MASK_BYTES`] is
    /// skipped as too large, naming the field, before any is drawn.
    #[test]
    fn masks_are_reserved_for_and_bounded() {
        let img = stoker_synth::procedural(300, 200, 3);
        let jpeg = stoker_synth::encode_jpeg(&img, 80).unwrap();
        let spec = stoker_core::TransformSpec::from_json(r#"{"ops": [{"op": "RandomHorizontalFlip"}]}"#).unwrap();
        let rng = stoker_core::SampleRng::from_seed(1);
        let plan = SamplePlan::new(ImageKind::Jpeg, &jpeg, &spec, &[], &rng, 1 << 30).unwrap();
        let specs = [FieldSpec::new("targets", "json", FieldKind::TargetsWithMasks)];
        let fields = |n: usize| -> Fields {
            let (boxes, outlines) = (
                vec!["[0, 0, 2, 2]"; n].join(", "),
                vec!["[[0, 0, 2, 0, 2, 2]]"; n].join(", "),
            );
            let doc = format!(r#"{{"boxes": [{boxes}], "segmentation": [{outlines}]}}"#);
            let t = stoker_core::targets::Targets::from_json(doc.as_bytes(), true).unwrap();
            vec![Some(FieldValue::Targets(Box::new(t)))]
        };
        let mut few = fields(10);
        place_targets(&specs, &mut few, &plan, &raw(vec![])).unwrap();
        assert_eq!(mask_need(&few, &plan), 10 * 300 * 200 + 300 * 200 * 3);
        let n = (MAX_MASK_BYTES / (300 * 200)) as usize + 1;
        let err = place_targets(&specs, &mut fields(n), &plan, &raw(vec![])).unwrap_err();
        assert_eq!(err.kind, SkipKind::TooLarge);
        assert!(
            err.reason.starts_with(&format!(
                "field \"targets\": the masks of {n} instances at 300x200 take {} bytes",
                n * 300 * 200
            )),
            "{}",
            err.reason
        );
    }

    #[test]
    fn record_values_as_stored() {
        let auto = |v: RawValue| as_kind(FieldKind::Auto, v).unwrap();
        assert_eq!(auto(RawValue::Ints(vec![3, 4])), FieldValue::IntList(vec![3, 4]));
        assert_eq!(auto(RawValue::Floats(vec![0.5])), FieldValue::FloatList(vec![0.5]));
        assert_eq!(
            auto(RawValue::Str(Bytes::from_static(b"hi"))),
            FieldValue::Text("hi".into())
        );
        assert_eq!(
            as_kind(FieldKind::Int, RawValue::Ints(vec![3])).unwrap(),
            FieldValue::Int(3)
        );
        assert!(as_kind(FieldKind::Int, RawValue::Ints(vec![3, 4])).is_err());
        assert!(as_kind(FieldKind::Text, RawValue::Ints(vec![3])).is_err());
    }
}
