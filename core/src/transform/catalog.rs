//! The registry's schemas as one catalogue: JSON for `_stoker.op_schema()`
//! and `stoker transforms --json`, a Python signature per op, and
//! docs/transforms.md's op table ([`markdown_table`]; a test fails on
//! drift).

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::ops::OP_SCHEMAS;
use super::schema::{ArgKind, OpSchema, Origin, Role};

/// Every op's schema as JSON: `[{"name", "doc", "origin", "role", "args":
/// [{"name", "kind", "python_type", "python_value", "required", "default",
/// "doc"}]}]`, in the registry's order. What `_stoker.op_schema()` and
/// `stoker transforms --json` give; the Python package's stubs annotate
/// each argument with its `python_type` and each attribute with its
/// `python_value` ([`ArgKind`]'s).
pub fn schema_json() -> Value {
    let ops: Vec<Value> = OP_SCHEMAS
        .iter()
        .map(|(name, s)| {
            let args: Vec<Value> = s
                .args
                .iter()
                .map(|a| {
                    json!({
                        "name": a.name,
                        "kind": a.kind.name(),
                        "python_type": a.kind.python_type(),
                        "python_value": a.kind.python_value(),
                        "required": a.default.is_none(),
                        "default": a.default_value(),
                        "doc": a.doc,
                    })
                })
                .collect();
            json!({
                "name": name,
                "doc": s.doc,
                "origin": match s.origin {
                    Origin::Torchvision => format!("torchvision.transforms.v2.{name}"),
                    Origin::Timm => "timm.data.rand_augment_transform".to_owned(),
                    Origin::TorchvisionReferences => format!("torchvision references/detection/transforms.py {name}"),
                },
                "role": s.role.name(),
                "args": args,
            })
        })
        .collect();
    Value::Array(ops)
}

/// Every argument kind as JSON, used by an op or not: `[{"name",
/// "accepts", "python_type", "python_value"}]` in [`ArgKind::ALL`]'s
/// order. What `_stoker.arg_kinds()` gives: the Python package's check
/// that each kind has exactly one converter, and none is left over.
pub fn kinds_json() -> Value {
    ArgKind::ALL
        .iter()
        .map(|k| {
            json!({
                "name": k.name(),
                "accepts": k.accepts(),
                "python_type": k.python_type(),
                "python_value": k.python_value(),
            })
        })
        .collect()
}

/// The op's Python signature: `RandomResizedCrop(size, scale=[0.08, 1.0], ...)`.
pub fn signature(name: &str, schema: &OpSchema) -> String {
    let args: Vec<String> = schema
        .args
        .iter()
        .map(|a| match a.default_value() {
            None => a.name.to_owned(),
            Some(d) => format!("{}={}", a.name, python_repr(&d)),
        })
        .collect();
    format!("{name}({})", args.join(", "))
}

/// A JSON value as Python's `repr` writes it (`true` -> `True`, `null` ->
/// `None`, strings in single quotes).
pub fn python_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("'{s}'"),
        Value::Array(items) => format!("[{}]", items.iter().map(python_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(_) => v.to_string(),
    }
}

/// docs/transforms.md's op table: one row per op, grouped by role, with
/// its signature and each argument's meaning.
pub fn markdown_table() -> String {
    let mut out = String::new();
    for role in [
        Role::Container,
        Role::Geometry,
        Role::Colour,
        Role::Policy,
        Role::Erase,
        Role::Boxes,
        Role::Output,
    ] {
        let _ = writeln!(out, "### {} ops\n", capitalise(role.name()));
        out.push_str("| op | what it does | arguments |\n| --- | --- | --- |\n");
        for (name, s) in OP_SCHEMAS.iter().filter(|(_, s)| s.role == role) {
            let args: Vec<String> = s
                .args
                .iter()
                .map(|a| {
                    let default = a
                        .default_value()
                        .map_or_else(|| "required".to_owned(), |d| format!("default `{}`", python_repr(&d)));
                    format!("`{}` ({}; {}): {}", a.name, a.kind.accepts(), default, a.doc)
                })
                .collect();
            let origin = match s.origin {
                Origin::Torchvision => "",
                Origin::Timm => " (timm)",
                Origin::TorchvisionReferences => " (torchvision's detection references)",
            };
            let args = if args.is_empty() {
                "none".to_owned()
            } else {
                args.join("<br>")
            };
            let _ = writeln!(
                out,
                "| `{}`{origin} | {} | {} |",
                signature(name, s),
                s.doc,
                args.replace('|', "\\|")
            );
        }
        out.push('\n');
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transform::{OP_NAMES, OP_SCHEMAS, Op};

    /// A value of each kind that deserialises (validity is not asked).
    fn sample(kind: ArgKind) -> Value {
        match kind {
            ArgKind::Transforms => json!([{"op": "RandomHorizontalFlip"}]),
            ArgKind::Size | ArgKind::ResizeSize => json!(32),
            ArgKind::Kernel => json!(5),
            ArgKind::Range => json!(15),
            ArgKind::Number => json!(2),
            ArgKind::Int => json!(4),
            ArgKind::Padding => json!(2),
            ArgKind::Str => json!("rand-m9-mstd0.5-inc1"),
            ArgKind::Dtype => json!("float32"),
            ArgKind::BoxFormat => json!("XYWH"),
            ArgKind::PerChannel => json!([0.5, 0.5, 0.5]),
            ArgKind::IntPair => json!([64, 48]),
            ArgKind::Ints => json!([32, 48]),
            other => panic!("no sample for a required {other:?}"),
        }
    }

    /// The op `name` with its required arguments, as JSON.
    fn minimal(name: &str, s: &OpSchema) -> Value {
        let mut map = serde_json::Map::new();
        map.insert("op".into(), json!(name));
        for a in s.args.iter().filter(|a| a.default.is_none()) {
            map.insert(a.name.into(), sample(a.kind));
        }
        Value::Object(map)
    }

    #[test]
    fn every_registered_op_has_a_schema_whose_arguments_are_its_fields() {
        assert_eq!(OP_SCHEMAS.len(), OP_NAMES.len());
        for (name, s) in OP_SCHEMAS {
            assert!(!s.doc.is_empty(), "{name}: no doc");
            let op: Op = serde_json::from_value(minimal(name, s)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(op.name(), *name);
            // The struct serialises exactly the schema's arguments, each
            // optional one at its schema default.
            let out = serde_json::to_value(&op).unwrap_or_else(|e| panic!("{name}: {e}"));
            // (The order is torchvision's: schema_check.py compares it.)
            let keys: std::collections::BTreeSet<&str> = out
                .as_object()
                .map(|m| m.keys().map(String::as_str).filter(|k| *k != "op").collect())
                .unwrap_or_default();
            let args: std::collections::BTreeSet<&str> = s.args.iter().map(|a| a.name).collect();
            assert_eq!(keys, args, "{name}: the struct's fields are not the schema's arguments");
            for a in s.args {
                assert!(!a.doc.is_empty(), "{name}.{}: no doc", a.name);
                if let Some(text) = a.default {
                    let default: Value =
                        serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}.{} default {text}: {e}", a.name));
                    // The default read back through the struct is itself.
                    let got = &out[a.name];
                    let same = match (got.as_f64(), default.as_f64()) {
                        (Some(x), Some(y)) => x == y,
                        _ => *got == default || (got.is_array() && numbers(got) == numbers(&default)),
                    };
                    assert!(same, "{name}.{}: default {default} reads back as {got}", a.name);
                }
            }
        }
    }

    fn numbers(v: &Value) -> Vec<Option<f64>> {
        v.as_array()
            .map(|items| items.iter().map(Value::as_f64).collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_missing_argument_takes_its_schema_default() {
        let op: Op = serde_json::from_value(json!({"op": "RandomResizedCrop", "size": 64})).unwrap();
        assert_eq!(op, crate::transform::RandomResizedCrop::new(64).into());
        let out = serde_json::to_value(&op).unwrap();
        assert_eq!(out["scale"], json!([0.08, 1.0]));
        assert_eq!(out["interpolation"], json!("bilinear"));
        // A required argument is still required, named by serde.
        let err = serde_json::from_value::<Op>(json!({"op": "RandomResizedCrop"})).unwrap_err();
        assert!(err.to_string().contains("size"), "{err}");
    }

    #[test]
    fn the_schema_json_lists_every_op_with_python_values() {
        let schema = schema_json();
        let ops = schema.as_array().unwrap();
        assert_eq!(ops.len(), OP_NAMES.len());
        let rrc = ops.iter().find(|o| o["name"] == "RandomResizedCrop").unwrap();
        assert_eq!(rrc["origin"], "torchvision.transforms.v2.RandomResizedCrop");
        assert_eq!(rrc["args"][0]["name"], "size");
        assert_eq!(rrc["args"][0]["required"], true);
        assert_eq!(rrc["args"][1]["default"], json!([0.08, 1.0]));
        assert_eq!(rrc["args"][1]["kind"], "pair");
        let sig = signature("RandomResizedCrop", OP_SCHEMAS[4].1);
        assert_eq!(
            sig,
            "RandomResizedCrop(size, scale=[0.08, 1.0], ratio=[0.75, 1.3333333333333333], interpolation='bilinear', antialias=True)"
        );
    }

    #[test]
    fn every_kind_has_a_unique_name_and_python_types() {
        let kinds = kinds_json();
        let kinds = kinds.as_array().unwrap();
        assert_eq!(kinds.len(), ArgKind::ALL.len());
        let mut names = std::collections::BTreeSet::new();
        for (kind, json) in ArgKind::ALL.iter().zip(kinds) {
            assert!(names.insert(kind.name()), "kind {} is named twice", kind.name());
            assert_eq!(json["name"], kind.name());
            for field in ["accepts", "python_type", "python_value"] {
                let text = json[field].as_str().unwrap_or_default();
                assert!(!text.trim().is_empty(), "kind {}: no {field}", kind.name());
            }
        }
        // An argument's entry carries its kind's Python types.
        let schema = schema_json();
        let size = &schema
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == "CenterCrop")
            .unwrap()["args"][0];
        assert_eq!(size["kind"], "size");
        assert_eq!(size["python_type"], ArgKind::Size.python_type());
        assert_eq!(size["python_value"], ArgKind::Size.python_value());
    }

    /// docs/transforms.md's op table is [`markdown_table`]'s output;
    /// `STOKER_BLESS=1` rewrites it.
    #[test]
    fn the_docs_op_table_is_generated_from_the_schema() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/transforms.md");
        if let Err(e) = crate::docs::check_generated(&path, "op table", &markdown_table()) {
            panic!("{e}");
        }
    }
}
