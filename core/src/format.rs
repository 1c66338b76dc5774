//! Shard formats: which one a dataset uses, how `auto` tells them apart,
//! and which fields of a record format hold the image and the label.
//!
//! [`ShardFormat`] (WebDataset, TFRecord, RecordIO, Parquet) knows each
//! format's extensions and record index name; [`FormatChoice`] is `auto`
//! (by extension) or a given format; [`RecordFields`]' unset names take
//! the format's defaults (TensorFlow's ImageNet feature names, Hugging
//! Face's columns).

use std::fmt;
use std::str::FromStr;

/// The format of a dataset's shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ShardFormat {
    /// WebDataset tar shards (`*.tar`).
    #[default]
    WebDataset,
    /// TFRecord files of `tf.train.Example`s (`*.tfrecord`, `*.tfrecords`,
    /// `*.tfrec`; names without an extension with `--format tfrecord`).
    TfRecord,
    /// MXNet RecordIO (`*.rec`, with `*.idx` beside it for random access).
    RecordIo,
    /// Parquet with an image column (`*.parquet`), as Hugging Face
    /// publishes datasets.
    Parquet,
}

impl ShardFormat {
    pub const ALL: [ShardFormat; 4] = [
        ShardFormat::WebDataset,
        ShardFormat::TfRecord,
        ShardFormat::RecordIo,
        ShardFormat::Parquet,
    ];

    /// The name `--format` takes and reports print.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WebDataset => "wds",
            Self::TfRecord => "tfrecord",
            Self::RecordIo => "recordio",
            Self::Parquet => "parquet",
        }
    }

    /// The files a listing takes as this format's shards, for messages.
    pub fn files(self) -> &'static str {
        match self {
            Self::WebDataset => "WebDataset *.tar",
            Self::TfRecord => "TFRecord *.tfrecord, *.tfrecords, *.tfrec",
            Self::RecordIo => "RecordIO *.rec",
            Self::Parquet => "Parquet *.parquet",
        }
    }

    /// The name of the record index beside the shard `name`, for the
    /// formats that have one: RecordIO's `<stem>.idx` (MXNet's `im2rec`
    /// and `MXIndexedRecordIO`), TFRecord's `<name>.idx` (DALI's
    /// `tfrecord2idx`).
    pub fn index_name(self, name: &str) -> Option<String> {
        match self {
            Self::WebDataset | Self::Parquet => None,
            Self::TfRecord => Some(format!("{name}.idx")),
            Self::RecordIo => Some(match name.rsplit_once('.') {
                Some((stem, ext)) if ext.eq_ignore_ascii_case("rec") => format!("{stem}.idx"),
                _ => format!("{name}.idx"),
            }),
        }
    }

    /// The format a shard's file name says by its extension, if any; a
    /// gzipped WebDataset or TFRecord shard ends in `.gz` ([`gzipped`]).
    pub fn from_name(name: &str) -> Option<Self> {
        let file = name.rsplit('/').next().unwrap_or(name);
        let (stem, gz) = strip_gz(file);
        let ext = stem.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase())?;
        match (ext.as_str(), gz) {
            ("tar", _) => Some(Self::WebDataset),
            ("tfrecord" | "tfrecords" | "tfrec", _) => Some(Self::TfRecord),
            ("rec", false) => Some(Self::RecordIo),
            ("parquet", false) => Some(Self::Parquet),
            _ => None,
        }
    }

    /// Whether a file named `name` is one of this format's shards in a
    /// listing where the format was given (`--format`): by extension, and
    /// for TFRecord also any name without one (TensorFlow's
    /// `train-00000-of-01024`).
    pub fn lists(self, name: &str) -> bool {
        let file = name.rsplit('/').next().unwrap_or(name);
        let stem = strip_gz(file).0;
        match Self::from_name(file) {
            Some(f) => f == self,
            None => self == Self::TfRecord && !stem.contains('.') && !stem.is_empty(),
        }
    }
}

/// A file name without its `.gz`, and whether it had one.
fn strip_gz(file: &str) -> (&str, bool) {
    match file.len().checked_sub(3) {
        Some(at) if file.is_char_boundary(at) && file[at..].eq_ignore_ascii_case(".gz") => (&file[..at], true),
        _ => (file, false),
    }
}

/// Whether the shard `name` is gzip-compressed as a whole (`.gz`, as
/// TensorFlow's `compression_type="GZIP"` writes TFRecord, or a
/// `.tar.gz`): read through a decompressor, from its beginning.
pub fn gzipped(name: &str) -> bool {
    strip_gz(name).1
}

impl fmt::Display for ShardFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `--format` value: a format, or `auto` (by the files' extensions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FormatChoice {
    #[default]
    Auto,
    Given(ShardFormat),
}

impl FromStr for FormatChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "wds" | "webdataset" | "tar" => Ok(Self::Given(ShardFormat::WebDataset)),
            "tfrecord" | "tfrecords" => Ok(Self::Given(ShardFormat::TfRecord)),
            "recordio" | "rec" => Ok(Self::Given(ShardFormat::RecordIo)),
            "parquet" => Ok(Self::Given(ShardFormat::Parquet)),
            _ => Err(format!(
                "unknown shard format {s:?}: use auto, wds, tfrecord, recordio or parquet"
            )),
        }
    }
}

impl fmt::Display for FormatChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Given(format) => format.fmt(f),
        }
    }
}

/// TensorFlow's ImageNet layout: the encoded image, the label and the
/// sample's name.
pub const DEFAULT_IMAGE_FIELD: &str = "image/encoded";
pub const DEFAULT_LABEL_FIELD: &str = "image/class/label";
pub const DEFAULT_KEY_FIELD: &str = "image/filename";

/// Hugging Face's layout of Parquet image datasets: an `Image` feature (a
/// struct of `bytes` and `path`) and a `ClassLabel`.
pub const DEFAULT_IMAGE_COLUMN: &str = "image";
pub const DEFAULT_LABEL_COLUMN: &str = "label";

/// Which fields of a record format's samples hold the image and the label
/// (`--image-key`, `--label-key`, `--label-offset`), `None` meaning the
/// format's own default ([`RecordFields::image_for`]). WebDataset and
/// RecordIO (whose records have no named fields) ignore the names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct RecordFields {
    /// The encoded image: a bytes feature (TFRecord), a binary or `Image`
    /// column (Parquet).
    pub image: Option<String>,
    /// The label: an int64 feature or an integer column. Samples without
    /// it are unlabelled (-1).
    pub label: Option<String>,
    /// Added to every label read: -1 turns TensorFlow's 1-based ImageNet
    /// labels into 0-based ones.
    pub label_offset: i64,
}

impl RecordFields {
    /// The image field for `format`: the one given, else TensorFlow's
    /// `image/encoded` or Hugging Face's `image`.
    pub fn image_for(&self, format: ShardFormat) -> &str {
        self.image.as_deref().unwrap_or(match format {
            ShardFormat::Parquet => DEFAULT_IMAGE_COLUMN,
            _ => DEFAULT_IMAGE_FIELD,
        })
    }

    /// The label field for `format`: the one given, else TensorFlow's
    /// `image/class/label` or Hugging Face's `label`.
    pub fn label_for(&self, format: ShardFormat) -> &str {
        self.label.as_deref().unwrap_or(match format {
            ShardFormat::Parquet => DEFAULT_LABEL_COLUMN,
            _ => DEFAULT_LABEL_FIELD,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_name_formats() {
        assert_eq!(
            ShardFormat::from_name("a/shard-000001.tar"),
            Some(ShardFormat::WebDataset)
        );
        assert_eq!(ShardFormat::from_name("train.TFRecord"), Some(ShardFormat::TfRecord));
        assert_eq!(ShardFormat::from_name("x.tfrec"), Some(ShardFormat::TfRecord));
        assert_eq!(ShardFormat::from_name("train-00000-of-01024"), None);
        assert_eq!(ShardFormat::from_name("stoker-index.json"), None);
        assert!(ShardFormat::TfRecord.lists("train-00000-of-01024"));
        assert!(ShardFormat::TfRecord.lists("p/train.tfrecords"));
        assert!(!ShardFormat::TfRecord.lists("train-00000-of-01024.idx"));
        assert!(!ShardFormat::TfRecord.lists("a.tar"));
        assert!(!ShardFormat::WebDataset.lists("train-00000-of-01024"));
        assert_eq!(ShardFormat::from_name("data/train.rec"), Some(ShardFormat::RecordIo));
        assert!(!ShardFormat::RecordIo.lists("train.idx"));
        assert_eq!(ShardFormat::from_name("a.tfrecord.GZ"), Some(ShardFormat::TfRecord));
        assert_eq!(ShardFormat::from_name("a.tar.gz"), Some(ShardFormat::WebDataset));
        assert_eq!(ShardFormat::from_name("a.rec.gz"), None);
        assert!(ShardFormat::TfRecord.lists("train-00000-of-01024.gz"));
        assert!(gzipped("train-00000-of-01024.gz") && !gzipped("a.tfrecord"));
    }

    #[test]
    fn record_indexes_sit_beside_their_shards() {
        assert_eq!(
            ShardFormat::RecordIo.index_name("a/train.rec").as_deref(),
            Some("a/train.idx")
        );
        assert_eq!(
            ShardFormat::TfRecord.index_name("train-00000-of-01024").as_deref(),
            Some("train-00000-of-01024.idx")
        );
        assert_eq!(ShardFormat::WebDataset.index_name("a.tar"), None);
    }

    #[test]
    fn choices_parse_and_print() {
        for choice in ["auto", "wds", "tfrecord", "recordio", "parquet"] {
            assert_eq!(choice.parse::<FormatChoice>().unwrap().to_string(), choice);
        }
        assert!("lmdb".parse::<FormatChoice>().unwrap_err().contains("lmdb"));
    }

    #[test]
    fn fields_default_by_format() {
        let fields = RecordFields::default();
        assert_eq!(fields.image_for(ShardFormat::TfRecord), "image/encoded");
        assert_eq!(fields.image_for(ShardFormat::Parquet), "image");
        assert_eq!(fields.label_for(ShardFormat::Parquet), "label");
        let given = RecordFields {
            image: Some("jpg".into()),
            ..RecordFields::default()
        };
        assert_eq!(given.image_for(ShardFormat::Parquet), "jpg");
    }
}
