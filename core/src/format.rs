//! Shard formats: which one a dataset uses, how `auto` tells them apart,
//! and which fields of a record format hold the image and the label.

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
}

impl ShardFormat {
    pub const ALL: [ShardFormat; 2] = [ShardFormat::WebDataset, ShardFormat::TfRecord];

    /// The name `--format` takes and reports print.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WebDataset => "wds",
            Self::TfRecord => "tfrecord",
        }
    }

    /// The format a shard's file name says by its extension, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        let file = name.rsplit('/').next().unwrap_or(name);
        let ext = file.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase())?;
        match ext.as_str() {
            "tar" => Some(Self::WebDataset),
            "tfrecord" | "tfrecords" | "tfrec" => Some(Self::TfRecord),
            _ => None,
        }
    }

    /// Whether a file named `name` is one of this format's shards in a
    /// listing where the format was given (`--format`): by extension, and
    /// for TFRecord also any name without one (TensorFlow's
    /// `train-00000-of-01024`).
    pub fn lists(self, name: &str) -> bool {
        let file = name.rsplit('/').next().unwrap_or(name);
        match Self::from_name(file) {
            Some(f) => f == self,
            None => self == Self::TfRecord && !file.contains('.') && !file.is_empty(),
        }
    }
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
            _ => Err(format!("unknown shard format {s:?}: use auto, wds or tfrecord")),
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

/// Which fields of a record format's samples hold the image and the label
/// (`--image-key`, `--label-key`, `--label-offset`). WebDataset ignores
/// them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RecordFields {
    /// The encoded image: a bytes feature.
    pub image: String,
    /// The label: an int64 feature. Samples without it are unlabelled (-1).
    pub label: String,
    /// Added to every label read: -1 turns TensorFlow's 1-based ImageNet
    /// labels into 0-based ones.
    pub label_offset: i64,
}

impl Default for RecordFields {
    fn default() -> Self {
        Self {
            image: DEFAULT_IMAGE_FIELD.to_owned(),
            label: DEFAULT_LABEL_FIELD.to_owned(),
            label_offset: 0,
        }
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
    }

    #[test]
    fn choices_parse_and_print() {
        for choice in ["auto", "wds", "tfrecord"] {
            assert_eq!(choice.parse::<FormatChoice>().unwrap().to_string(), choice);
        }
        assert!("parquet".parse::<FormatChoice>().unwrap_err().contains("parquet"));
    }
}
