//! A sample's requested fields read as their kinds, as the sample is read
//! (before its image is decoded): a sample whose field is missing or not
//! its kind is skipped then, naming the field, and never decoded.

use bytes::Bytes;
use stoker_core::{FieldKind, FieldSpec, FieldValue, Fields, NpyArray};

use super::{SkipKind, Skipped};
use crate::wds::{MemberProblem, RawField, RawSample, RawValue};

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

/// A stored value read as `kind`, or why it is not one.
fn as_kind(kind: FieldKind, value: RawValue) -> Result<FieldValue, String> {
    use RawValue as R;
    Ok(match (kind, value) {
        // As stored (record formats; a WebDataset field's kind is always
        // resolved from its extension before the item starts).
        (FieldKind::Auto, R::Bytes(b)) | (FieldKind::Bytes, R::Bytes(b) | R::Str(b)) => FieldValue::Bytes(b),
        (FieldKind::Auto, R::Str(b)) | (FieldKind::Text, R::Bytes(b) | R::Str(b)) => FieldValue::Text(utf8(b)?),
        (FieldKind::Auto, R::Int(i)) => FieldValue::Int(i),
        (FieldKind::Auto, R::Float(f)) => FieldValue::Float(f),
        (FieldKind::Auto | FieldKind::IntList, R::Ints(v)) => FieldValue::IntList(v),
        (FieldKind::Auto | FieldKind::FloatList, R::Floats(v)) => FieldValue::FloatList(v),
        (_, R::BytesList(list)) => {
            return Err(format!("{} byte strings stored where one was expected", list.len()));
        }
        (FieldKind::Json, R::Bytes(b) | R::Str(b)) => {
            let text = utf8(b)?;
            serde_json::from_str::<serde::de::IgnoredAny>(&text).map_err(|e| format!("not JSON: {e}"))?;
            FieldValue::Json(text)
        }
        (FieldKind::Npy, R::Bytes(b) | R::Str(b)) => FieldValue::Npy(NpyArray::parse(b)?),
        (FieldKind::Int, v) => FieldValue::Int(one(ints(v)?)?),
        (FieldKind::IntList, v) => FieldValue::IntList(ints(v)?),
        (FieldKind::Float, v) => FieldValue::Float(one(floats(v)?)?),
        (FieldKind::FloatList, v) => FieldValue::FloatList(floats(v)?),
        (FieldKind::Mask, _) => return Err("a mask is read with its image, not on its own".to_owned()),
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

fn utf8(b: Bytes) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|e| format!("not UTF-8 (invalid byte at {})", e.utf8_error().valid_up_to()))
}

fn one<T: Copy>(v: Vec<T>) -> Result<T, String> {
    match v.as_slice() {
        [x] => Ok(*x),
        other => Err(format!("{} values where one was expected", other.len())),
    }
}

/// Numbers written as text: whitespace- or comma-separated, or a JSON
/// list (`3`, `1 5 9`, `[1, 5, 9]`).
fn text_numbers<T: std::str::FromStr>(b: &[u8]) -> Result<Vec<T>, String> {
    let text = std::str::from_utf8(b).map_err(|_| "not UTF-8 text".to_owned())?;
    let inner = text.trim().trim_start_matches('[').trim_end_matches(']');
    inner
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<T>().map_err(|_| {
                let shown: String = s.chars().take(32).collect();
                format!("{shown:?} is not a number of this kind")
            })
        })
        .collect()
}

fn ints(v: RawValue) -> Result<Vec<i64>, String> {
    match v {
        RawValue::Int(i) => Ok(vec![i]),
        RawValue::Ints(v) => Ok(v),
        RawValue::Bytes(b) | RawValue::Str(b) => text_numbers(&b),
        other => Err(format!("a stored {} is not integers", stored_name(&other))),
    }
}

fn floats(v: RawValue) -> Result<Vec<f64>, String> {
    match v {
        RawValue::Float(f) => Ok(vec![f]),
        RawValue::Int(i) => Ok(vec![i as f64]),
        RawValue::Floats(v) => Ok(v),
        RawValue::Ints(v) => Ok(v.into_iter().map(|i| i as f64).collect()),
        RawValue::Bytes(b) | RawValue::Str(b) => text_numbers(&b),
        other => Err(format!("a stored {} is not numbers", stored_name(&other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wds::ImageKind;

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
