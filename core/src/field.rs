//! A sample's fields beyond its image and label: what a request asks for
//! ([`FieldSpec`]), how each is read ([`FieldKind`]) and what arrives
//! ([`FieldValue`]).
//!
//! A request names each field it wants by a name of its choosing, a source
//! in the shard (a WebDataset member extension such as `txt` or
//! `seg.png`, a TFRecord feature, a Parquet column, RecordIO's `label`)
//! and a kind. The kinds follow the ecosystems': WebDataset's decoders by
//! extension (`txt` is text, `json` JSON, `cls` an integer, `npy` an
//! array), and for record formats the type the record stores ([`FieldKind::Auto`]).
//!
//! The kinds are declared once, by the `field_kinds!` table: each kind's
//! name, aliases, proto number and Python type. The parser, the wire
//! mapping (checked against the proto by `every_kind_is_its_proto_value`),
//! the CLI's `--field` help and Python's `Field.KINDS` all come from it.
//! [`FieldValue::from_bytes`] reads a member's bytes as each kind
//! ([`NpyArray`] for `npy`); [`ViewSpec`] and the checks a request passes
//! before any work live here too, shared by worker, wire and client.
//!
//! A sample without a requested field is skipped (`missing_field`) unless
//! the field is optional; a value that does not parse as its kind is
//! skipped as `bad_field`, naming the field.

use bytes::Bytes;

use crate::format::ShardFormat;
pub use crate::npy::NpyArray;

/// Names a field may not take: the batch's own entries (and `epoch`,
/// which `stoker stream --fields-out` writes beside them).
pub const RESERVED_FIELD_NAMES: [&str; 5] = ["image", "label", "key", "views", "epoch"];

/// The most fields one request may ask for.
pub const MAX_FIELDS: usize = 64;

/// The most views one request may ask for (DINOv2 takes 10).
pub const MAX_VIEWS: usize = 32;

/// One more augmented view of the sample's image, from the same decode,
/// with a pipeline of its own (DINOv2's global and local crops, SimCLR's
/// two views). Its draws come from (seed, epoch, sample, view index).
#[derive(Clone, Debug, PartialEq)]
pub struct ViewSpec {
    pub name: String,
    pub transform: crate::TransformSpec,
}

/// Checks a request's views: names unique, not reserved and not a
/// field's; each pipeline valid (ending at a fixed square size).
pub fn validate_views(views: &[ViewSpec], fields: &[FieldSpec]) -> Result<(), FieldError> {
    if views.len() > MAX_VIEWS {
        return Err(FieldError::TooManyViews(views.len()));
    }
    for (i, v) in views.iter().enumerate() {
        if v.name.is_empty() || RESERVED_FIELD_NAMES.contains(&v.name.as_str()) {
            return Err(FieldError::Reserved(v.name.clone()));
        }
        if views[..i].iter().any(|w| w.name == v.name) || fields.iter().any(|f| f.name == v.name) {
            return Err(FieldError::Duplicate(v.name.clone()));
        }
        v.transform.validate().map_err(|e| FieldError::View {
            view: v.name.clone(),
            why: e.to_string(),
        })?;
        if v.transform.size.side().is_none() {
            return Err(FieldError::View {
                view: v.name.clone(),
                why: "transform does not end at a fixed square size (a view is one block of equal images): \
                      end it with RandomResizedCrop, CenterCrop, RandomCrop or Resize([s, s])"
                    .to_owned(),
            });
        }
    }
    Ok(())
}

/// The field kinds, declared once: each kind's variant, its number on the
/// wire (`stoker.v1.FieldKind`, checked against the proto by
/// `every_kind_is_its_proto_value`), its name and aliases (the CLI's
/// `--field NAME=SOURCE:KIND`, Python's `Field(kind=)`), and what Python
/// receives. The enum, its lists, its parser, the wire mapping, the CLI's
/// help and Python's `Field.KINDS` all come from here.
macro_rules! field_kinds {
    ($($(#[doc = $doc:literal])* $variant:ident = $wire:literal, $name:literal, [$($alias:literal),*], $python:literal;)*) => {
        /// How a field's bytes become a value.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum FieldKind {
            $($(#[doc = $doc])* $variant,)*
        }

        impl FieldKind {
            /// Every kind, in wire order.
            pub const ALL: [FieldKind; [$($wire),*].len()] = [$(FieldKind::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(FieldKind::$variant => $name,)*
                }
            }

            /// Other names the parser accepts for the kind.
            pub fn aliases(self) -> &'static [&'static str] {
                match self {
                    $(FieldKind::$variant => &[$($alias),*],)*
                }
            }

            /// The kind's number in `stoker.v1.FieldKind`.
            pub fn wire(self) -> i32 {
                match self {
                    $(FieldKind::$variant => $wire,)*
                }
            }

            /// The kind numbered `n` on the wire, if this build knows it.
            pub fn from_wire(n: i32) -> Option<Self> {
                match n {
                    $($wire => Some(FieldKind::$variant),)*
                    _ => None,
                }
            }

            /// What the Python package delivers for it.
            pub fn python_type(self) -> &'static str {
                match self {
                    $(FieldKind::$variant => $python,)*
                }
            }

            /// The kind's doc, on one line.
            pub fn doc(self) -> &'static str {
                match self {
                    $(FieldKind::$variant => concat!($($doc),*).trim_ascii(),)*
                }
            }
        }
    };
}

field_kinds! {
    /// Whatever the record stores: a TFRecord feature's list kind (int64
    /// list, float list, bytes), a Parquet column's type, RecordIO's label
    /// array. For WebDataset, the member's extension decides, as
    /// WebDataset's default decoders do (`FieldKind::for_extension`).
    Auto = 0, "auto", [], "as stored";
    /// One integer (`cls`; a one-value int64 feature).
    Int = 1, "int", [], "int";
    /// Integers (a multi-label).
    IntList = 2, "int_list", ["ints"], "list[int]";
    /// One number.
    Float = 3, "float", [], "float";
    /// Numbers.
    FloatList = 4, "float_list", ["floats"], "list[float]";
    /// UTF-8 text (`txt`): a caption.
    Text = 5, "text", ["str", "txt"], "str";
    /// A JSON document (`json`), checked to parse.
    Json = 6, "json", [], "the parsed document";
    /// The bytes as they are.
    Bytes = 7, "bytes", [], "bytes";
    /// A NumPy `.npy` array: dtype and shape kept.
    Npy = 8, "npy", [], "numpy.ndarray";
    /// A segmentation mask: an 8-bit image (a grayscale PNG; of an RGB
    /// one the first channel) of the sample's image's size, which follows
    /// the image's geometry (crops, resizes, flips, pads, rotations and
    /// affine warps, with nearest-neighbour sampling and 0 where nothing
    /// is) and none of its colour ops. Delivered as `|u1` `[1, H, W]`.
    Mask = 9, "mask", [], "uint8 array [1, H, W]";
    /// Detection targets: a JSON document of one image's boxes (in
    /// torchvision's XYXY, XYWH or CXCYWH), labels, optional iscrowd,
    /// area and keypoints (`stoker_core::targets::Targets::from_json`),
    /// which follow the image's geometry as torchvision v2 moves boxes
    /// and keypoints. Delivered as torchvision's target dict.
    Targets = 10, "targets", ["detection"], "dict of tensors (boxes, labels, ...)";
    /// Detection targets as `targets`, with each instance's mask: its
    /// `segmentation` (COCO's polygons or RLE) drawn on the image as
    /// pycocotools draws it, then through the image's geometry as a
    /// `mask` field. Delivered with `masks`, uint8 `[N, H, W]`.
    TargetsWithMasks = 11, "targets_with_masks", ["detection_with_masks"], "dict of tensors (boxes, labels, masks, ...)";
}

impl FieldKind {
    /// Detection targets, with masks or without.
    pub fn is_targets(self) -> bool {
        matches!(self, FieldKind::Targets | FieldKind::TargetsWithMasks)
    }

    /// A kind by its name or an alias (`str` and `txt` for text, `ints`
    /// and `floats` for the lists).
    pub fn parse(name: &str) -> Result<Self, FieldError> {
        Self::ALL
            .iter()
            .copied()
            .find(|k| k.as_str() == name || k.aliases().contains(&name))
            .ok_or_else(|| FieldError::UnknownKind(name.to_owned()))
    }

    /// The kinds and their aliases, for help texts: `int, int_list (ints), ...`.
    pub fn listing() -> String {
        Self::ALL
            .iter()
            .map(|k| match k.aliases() {
                [] => k.as_str().to_owned(),
                aliases => format!("{} ({})", k.as_str(), aliases.join(", ")),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The kinds as a Markdown table (name, aliases, what Python
    /// receives, what it is): docs/fields.md's, checked by a test.
    pub fn markdown_table() -> String {
        let mut out = String::from("| kind | aliases | in Python | what it is |\n| --- | --- | --- | --- |\n");
        for k in Self::ALL {
            let aliases: Vec<String> = k.aliases().iter().map(|a| format!("`{a}`")).collect();
            let doc = k.doc().split_whitespace().collect::<Vec<_>>().join(" ");
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                k.as_str(),
                aliases.join(", "),
                k.python_type(),
                doc.replace('|', "\\|")
            ));
        }
        out
    }

    /// The kind WebDataset's default decoders give a member by its last
    /// extension (`seg.png` is a `png`). Images, masks and the formats
    /// that need a Python runtime (pickle, torch, msgpack) have none here:
    /// ask for those as `bytes`.
    pub fn for_extension(ext: &str) -> Result<Self, FieldError> {
        let last = ext.rsplit('.').next().unwrap_or(ext).to_ascii_lowercase();
        Ok(match last.as_str() {
            "txt" | "text" | "transcript" => FieldKind::Text,
            "cls" | "cls2" | "class" | "count" | "index" | "inx" | "id" => FieldKind::Int,
            "json" | "jsn" => FieldKind::Json,
            "npy" => FieldKind::Npy,
            "jpg" | "jpeg" | "png" | "ppm" | "pgm" | "pbm" | "pnm" | "webp" | "tif" | "tiff" | "bmp" => {
                return Err(FieldError::NoDecoder {
                    ext: ext.to_owned(),
                    why: "images other than the sample's own are not decoded as fields yet",
                });
            }
            "pyd" | "pickle" | "pth" | "ten" | "tb" | "mp" | "msgpack" | "npz" | "cbor" => {
                return Err(FieldError::NoDecoder {
                    ext: ext.to_owned(),
                    why: "WebDataset decodes it with a Python library the worker does not run",
                });
            }
            _ => {
                return Err(FieldError::NoDecoder {
                    ext: ext.to_owned(),
                    why: "no WebDataset decoder has this extension",
                });
            }
        })
    }
}

impl std::fmt::Display for FieldKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One field a request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    /// The name it is delivered under.
    pub name: String,
    /// Where it is in the shard: a WebDataset extension, a TFRecord
    /// feature, a Parquet column, RecordIO's `label`.
    pub source: String,
    pub kind: FieldKind,
    /// A sample without it is delivered with no value instead of skipped.
    pub optional: bool,
}

impl FieldSpec {
    pub fn new(name: &str, source: &str, kind: FieldKind) -> Self {
        Self {
            name: name.to_owned(),
            source: source.to_owned(),
            kind,
            optional: false,
        }
    }

    /// `NAME=SOURCE[:KIND]` (the CLI's `--field`, Python's `fields=`):
    /// `caption=txt`, `meta=json:json`, `labels=labels:int_list`; a `?`
    /// after the source or at the end makes the field optional
    /// (`caption=txt?`, `caption=txt?:bytes`, `caption=txt:bytes?`).
    pub fn parse(text: &str) -> Result<Self, FieldError> {
        let bad = || FieldError::Syntax(text.to_owned());
        let (name, rest) = text.split_once('=').ok_or_else(bad)?;
        let (rest, optional_at_end) = match rest.strip_suffix('?') {
            Some(r) => (r, true),
            None => (rest, false),
        };
        let (source, kind) = match rest.rsplit_once(':') {
            Some((s, k)) => (s, FieldKind::parse(k)?),
            None => (rest, FieldKind::Auto),
        };
        let (source, optional) = match source.strip_suffix('?') {
            Some(s) => (s, true),
            None => (source, optional_at_end),
        };
        if name.is_empty() || source.is_empty() {
            return Err(bad());
        }
        Ok(Self {
            optional,
            ..Self::new(name, source, kind)
        })
    }

    /// The kind this field is read as from shards of `format`: for
    /// WebDataset an `auto` kind is the extension's, decided here, so that
    /// an extension without a decoder is refused before any work.
    pub fn resolved(&self, format: ShardFormat) -> Result<FieldKind, FieldError> {
        match (format, self.kind) {
            (ShardFormat::WebDataset, FieldKind::Auto) => {
                FieldKind::for_extension(&self.source).map_err(|e| e.for_field(&self.name))
            }
            (ShardFormat::RecordIo, _) if self.source != "label" => Err(FieldError::Source {
                field: self.name.clone(),
                origin: self.source.clone(),
                why: "RecordIO records hold only the header's label array: ask for source `label`",
            }),
            (ShardFormat::RecordIo, FieldKind::Auto) => Ok(FieldKind::FloatList),
            (_, kind) => Ok(kind),
        }
    }
}

/// That a request asking for detection targets has a transform that can
/// move them ([`crate::TransformSpec::check_targets`]), and that one whose
/// transform chooses by the boxes (`RandomIoUCrop`) asks for them, from
/// one field (torchvision refuses both too): refused before any work,
/// naming the op.
pub fn validate_targets(fields: &[FieldSpec], spec: &crate::TransformSpec) -> Result<(), crate::SpecError> {
    let targets = fields.iter().filter(|f| f.kind.is_targets()).count();
    if targets > 0 {
        spec.check_targets()?;
    }
    if let Some((at, op)) = spec.needs_boxes()
        && targets != 1
    {
        return Err(crate::SpecError::NeedsBoxes {
            at,
            op,
            fields: targets,
        });
    }
    Ok(())
}

/// Checks a request's fields: names unique and not reserved, each kind
/// known for `format` (when known: `None` before the dataset is listed).
pub fn validate_fields(fields: &[FieldSpec], format: Option<ShardFormat>) -> Result<(), FieldError> {
    if fields.len() > MAX_FIELDS {
        return Err(FieldError::TooMany(fields.len()));
    }
    for (i, f) in fields.iter().enumerate() {
        if RESERVED_FIELD_NAMES.contains(&f.name.as_str()) {
            return Err(FieldError::Reserved(f.name.clone()));
        }
        if f.name.is_empty() || f.source.is_empty() {
            return Err(FieldError::Syntax(format!("{}={}", f.name, f.source)));
        }
        if fields[..i].iter().any(|g| g.name == f.name) {
            return Err(FieldError::Duplicate(f.name.clone()));
        }
        if let Some(format) = format {
            f.resolved(format)?;
        }
    }
    Ok(())
}

/// A field's value as delivered.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldValue {
    Int(i64),
    IntList(Vec<i64>),
    Float(f64),
    FloatList(Vec<f64>),
    Text(String),
    /// A JSON document that parsed, as its text.
    Json(String),
    Bytes(Bytes),
    /// An array: an `npy` field's (dtype and shape kept), or a mask's after
    /// the sample's geometric steps (`|u1`, `[1, H, W]`). The request's
    /// kind says which; the value's shape is the same.
    Array(NpyArray),
    /// A view of the sample's image ([`ViewSpec`]): uint8 HWC RGB pixels,
    /// square, of its pipeline's size.
    Image(Bytes),
    /// Detection targets: read, then (in the worker) placed on the image
    /// and moved through its geometry.
    Targets(Box<crate::targets::Targets>),
}

impl FieldValue {
    /// Bytes it holds, for chunk sizes.
    pub fn byte_len(&self) -> usize {
        match self {
            FieldValue::Int(_) | FieldValue::Float(_) => 8,
            FieldValue::IntList(v) => v.len() * 8,
            FieldValue::FloatList(v) => v.len() * 8,
            FieldValue::Text(s) | FieldValue::Json(s) => s.len(),
            FieldValue::Bytes(b) | FieldValue::Image(b) => b.len(),
            FieldValue::Array(a) => a.data.len(),
            FieldValue::Targets(t) => t.byte_len(),
        }
    }
}

impl FieldValue {
    /// A field's bytes as stored in a file-like member (a WebDataset
    /// member, a bytes feature, a binary column) read as `kind`, as
    /// WebDataset's decoders read them: text must be UTF-8, JSON must
    /// parse, numbers are written as text (`3`, `1 5 9`, `[1, 5, 9]`), an
    /// `npy` is a `.npy` file. `Auto` keeps the bytes. A mask is decoded
    /// with its image, never here. Errors say what is wrong, not where
    /// (the caller names the field).
    pub fn from_bytes(kind: FieldKind, b: Bytes) -> Result<FieldValue, String> {
        Ok(match kind {
            FieldKind::Auto | FieldKind::Bytes => FieldValue::Bytes(b),
            FieldKind::Text => FieldValue::Text(utf8(b)?),
            FieldKind::Json => {
                let text = utf8(b)?;
                // serde_json bounds nesting (128 levels): a hostile document
                // is an error, not a deep recursion.
                serde_json::from_str::<serde::de::IgnoredAny>(&text).map_err(|e| format!("not JSON: {e}"))?;
                FieldValue::Json(text)
            }
            FieldKind::Npy => FieldValue::Array(NpyArray::parse(b)?),
            FieldKind::Int => FieldValue::Int(one(text_numbers(&b)?)?),
            FieldKind::IntList => FieldValue::IntList(text_numbers(&b)?),
            FieldKind::Float => FieldValue::Float(one(text_numbers(&b)?)?),
            FieldKind::FloatList => FieldValue::FloatList(text_numbers(&b)?),
            FieldKind::Mask => return Err("a mask is read with its image, not on its own".to_owned()),
            FieldKind::Targets => FieldValue::Targets(Box::new(crate::targets::Targets::from_json(&b, false)?)),
            FieldKind::TargetsWithMasks => FieldValue::Targets(Box::new(crate::targets::Targets::from_json(&b, true)?)),
        })
    }

    /// As JSON (`stoker stream --fields-out`): text as a string, a JSON
    /// field as the document, numbers as numbers or lists (a NaN as
    /// null), bytes as a list of byte values, an array as its dtype, shape
    /// and data's length.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        let number = |f: f64| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number);
        match self {
            FieldValue::Int(i) => Value::from(*i),
            FieldValue::IntList(v) => Value::from(v.clone()),
            FieldValue::Float(f) => number(*f),
            FieldValue::FloatList(v) => Value::Array(v.iter().map(|&f| number(f)).collect()),
            FieldValue::Text(s) => Value::from(s.as_str()),
            FieldValue::Json(s) => serde_json::from_str(s).unwrap_or_else(|_| Value::from(s.as_str())),
            FieldValue::Bytes(b) => Value::from(b.to_vec()),
            FieldValue::Array(a) => {
                serde_json::json!({"dtype": a.dtype, "shape": a.shape, "bytes": a.data.len()})
            }
            FieldValue::Image(b) => serde_json::json!({"bytes": b.len()}),
            FieldValue::Targets(t) => t.to_json(),
        }
    }
}

fn utf8(b: Bytes) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|e| format!("not UTF-8 (invalid byte at {})", e.utf8_error().valid_up_to()))
}

/// The one value of `v`.
pub fn one<T: Copy>(v: Vec<T>) -> Result<T, String> {
    match v.as_slice() {
        [x] => Ok(*x),
        other => Err(format!("{} values where one was expected", other.len())),
    }
}

/// Numbers written as text: whitespace- or comma-separated, or a JSON
/// list (`3`, `1 5 9`, `[1, 5, 9]`).
pub fn text_numbers<T: std::str::FromStr>(b: &[u8]) -> Result<Vec<T>, String> {
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

/// A sample's values, in the request's order: `None` for an optional
/// field the sample lacks.
pub type Fields = Vec<Option<FieldValue>>;

/// Why a request's fields are refused, or a field's value could not be
/// read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    #[error("field {0:?}: expected NAME=SOURCE[:KIND][?]")]
    Syntax(String),
    #[error("unknown field kind {0:?} (kinds: {kinds})", kinds = FieldKind::listing())]
    UnknownKind(String),
    #[error("field name {0:?} is reserved (image, label, key, views and epoch are the batch's own)")]
    Reserved(String),
    #[error("{0:?} is asked for twice (as a field or a view)")]
    Duplicate(String),
    #[error("{0} fields asked for; at most 64")]
    TooMany(usize),
    #[error("{0} views asked for; at most 32")]
    TooManyViews(usize),
    #[error("view {view:?}: {why}")]
    View { view: String, why: String },
    #[error("extension {ext:?} has no decoder: {why}; name a kind (for example {ext}:bytes)")]
    NoDecoder { ext: String, why: &'static str },
    #[error("field {field:?}: extension {ext:?} has no decoder: {why}; name a kind (for example {ext}:bytes)")]
    FieldNoDecoder {
        field: String,
        ext: String,
        why: &'static str,
    },
    #[error("field {field:?}: source {origin:?}: {why}")]
    Source {
        field: String,
        origin: String,
        why: &'static str,
    },
}

impl FieldError {
    fn for_field(self, field: &str) -> Self {
        match self {
            FieldError::NoDecoder { ext, why } => FieldError::FieldNoDecoder {
                field: field.to_owned(),
                ext,
                why,
            },
            e => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/fields.md's kinds table is [`FieldKind::markdown_table`]'s
    /// output; `STOKER_BLESS=1` rewrites it. A new kind is its row in
    /// `field_kinds!`, its number in the proto, and its reading in
    /// [`FieldValue::from_bytes`]; this keeps the page with them.
    #[test]
    fn the_docs_field_kinds_table_is_generated_from_the_kinds() {
        let table = FieldKind::markdown_table();
        for k in FieldKind::ALL {
            assert!(table.contains(&format!("| `{k}` |")), "{table}");
        }
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/fields.md");
        if let Err(e) = crate::docs::check_generated(&path, "field kinds", &table) {
            panic!("{e}");
        }
    }

    #[test]
    fn cli_syntax() {
        assert_eq!(
            FieldSpec::parse("caption=txt").unwrap(),
            FieldSpec::new("caption", "txt", FieldKind::Auto)
        );
        let f = FieldSpec::parse("labels=image/labels:int_list?").unwrap();
        assert_eq!(
            (f.source.as_str(), f.kind, f.optional),
            ("image/labels", FieldKind::IntList, true)
        );
        for text in ["c=txt?", "c=txt?:bytes", "c=txt:bytes?"] {
            let f = FieldSpec::parse(text).unwrap();
            assert!(f.optional && f.source == "txt", "{text}: {f:?}");
        }
        assert!(!FieldSpec::parse("c=txt:bytes").unwrap().optional);
        assert!(matches!(FieldSpec::parse("caption"), Err(FieldError::Syntax(_))));
        assert!(matches!(
            FieldSpec::parse("x=txt:str8"),
            Err(FieldError::UnknownKind(_))
        ));
    }

    #[test]
    fn webdataset_kinds_by_extension() {
        for (ext, kind) in [
            ("txt", FieldKind::Text),
            ("json", FieldKind::Json),
            ("cls", FieldKind::Int),
            ("npy", FieldKind::Npy),
            ("meta.json", FieldKind::Json),
        ] {
            assert_eq!(FieldKind::for_extension(ext), Ok(kind), "{ext}");
        }
        for ext in ["pyd", "xyz", "seg.png"] {
            let err = FieldKind::for_extension(ext).unwrap_err().to_string();
            assert!(err.contains(ext) && err.contains(":bytes"), "{err}");
        }
    }

    #[test]
    fn requests_are_checked_before_any_work() {
        let wds = Some(ShardFormat::WebDataset);
        let ok = [
            FieldSpec::new("caption", "txt", FieldKind::Auto),
            FieldSpec::new("meta", "json", FieldKind::Auto),
        ];
        validate_fields(&ok, wds).unwrap();
        for name in RESERVED_FIELD_NAMES {
            let err = validate_fields(&[FieldSpec::new(name, "txt", FieldKind::Auto)], wds).unwrap_err();
            assert_eq!(err, FieldError::Reserved(name.to_owned()));
        }
        let twice = [ok[0].clone(), ok[0].clone()];
        assert_eq!(
            validate_fields(&twice, wds),
            Err(FieldError::Duplicate("caption".into()))
        );
        let err = validate_fields(&[FieldSpec::new("x", "xyz", FieldKind::Auto)], wds).unwrap_err();
        assert!(err.to_string().contains("field \"x\""), "{err}");
        // The same source names a feature in a TFRecord: read as stored.
        validate_fields(
            &[FieldSpec::new("x", "xyz", FieldKind::Auto)],
            Some(ShardFormat::TfRecord),
        )
        .unwrap();
        let err = validate_fields(
            &[FieldSpec::new("x", "xyz", FieldKind::Auto)],
            Some(ShardFormat::RecordIo),
        );
        assert!(matches!(err, Err(FieldError::Source { .. })));
    }
}
