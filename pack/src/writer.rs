//! One shard being written, in each format `stoker pack` writes, with the
//! record index the format's own tools write beside it.
//!
//! - WebDataset: `<key>.<ext>` and `<key>.cls` members of a tar.
//! - TFRecord: `tf.train.Example`s in TensorFlow's ImageNet layout
//!   (`image/encoded`, `image/format`, `image/class/label`,
//!   `image/filename`), and DALI's `<shard>.idx` (`offset size` lines).
//! - RecordIO: MXNet's framing of `IRHeader` + image (`im2rec`'s layout),
//!   and `<stem>.idx` (`index<TAB>offset` lines, as `MXIndexedRecordIO`).
//! - Parquet: Hugging Face's layout, an `image` struct of `bytes` and
//!   `path` and an int64 `label`, with the `huggingface` schema metadata
//!   that makes `datasets` see an `Image` and a `ClassLabel`; row groups of
//!   [`PARQUET_ROW_GROUP_ROWS`] rows.
//!
//! Labels are written as given (0-based ImageFolder classes, also in
//! TFRecord, where TensorFlow's own ImageNet shards start at 1).
//!
//! A detection sample ([`Carries::Targets`]) has no label: its targets
//! JSON (`stoker_core::targets`' schema) goes where a worker's `targets`
//! field reads it: a `<key>.json` member, a [`TARGETS_FEATURE`] bytes
//! feature, or a [`TARGETS_COLUMN`] string column. RecordIO has no place
//! for it: `stoker pack` refuses before writing.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch, StringArray, StructArray};
use arrow_schema::{DataType, Field, Fields, Schema};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use prost::Message;
use stoker_core::ShardFormat;
use stoker_formats::tfrecord::proto;

use super::error::{PackError, io_err};
use stoker_formats::tar::{append_member, padding};

/// Rows per Parquet row group: what Hugging Face `datasets` writes for
/// image datasets.
pub const PARQUET_ROW_GROUP_ROWS: usize = 100;

/// The TFRecord feature a detection sample's targets JSON is written to.
pub const TARGETS_FEATURE: &str = "image/object/targets";

/// The Parquet column (a string) a detection sample's targets JSON is
/// written to.
pub const TARGETS_COLUMN: &str = "targets";

/// What a shard's samples carry beside their images.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Carries {
    /// A class label each (ImageFolder, converted datasets).
    Labels,
    /// A targets JSON each, no label (detection datasets).
    Targets,
}

/// One sample to write.
pub(super) struct Sample<'a> {
    pub key: &'a str,
    /// The image's extension (`jpg`, `png`...).
    pub ext: &'a str,
    pub data: &'a [u8],
    /// Its class label; `None` for a detection sample.
    pub label: Option<i64>,
    /// Its targets JSON, for a detection sample.
    pub targets: Option<&'a [u8]>,
    /// Its number in the whole dataset (RecordIO's `id`).
    pub id: u64,
}

/// The bytes a sample adds to a shard of `format`, about: what shards are
/// cut by. `extra` is its label's or targets' bytes.
pub(super) fn sample_bytes(format: ShardFormat, size: u64, extra: u64) -> u64 {
    match format {
        ShardFormat::WebDataset => 1024 + size + padding(size) + 1024 + extra + padding(extra),
        // Framing, the Example's or IRHeader's fields, the key: a few
        // hundred bytes at most.
        ShardFormat::TfRecord | ShardFormat::RecordIo | ShardFormat::Parquet => size + extra + 128,
    }
}

/// A label's bytes as [`sample_bytes`] counts them.
pub(super) fn label_bytes(label: i64) -> u64 {
    label.to_string().len() as u64
}

/// The shard's file name.
pub(super) fn shard_name(format: ShardFormat, index: usize) -> String {
    let ext = match format {
        ShardFormat::WebDataset => "tar",
        ShardFormat::TfRecord => "tfrecord",
        ShardFormat::RecordIo => "rec",
        ShardFormat::Parquet => "parquet",
    };
    format!("shard-{index:06}.{ext}")
}

/// A shard's record index file: its name and text.
pub(super) struct RecordIndex {
    pub name: String,
    pub text: Bytes,
}

/// A shard being written to a local file.
pub(super) struct ShardWriter {
    format: ShardFormat,
    path: PathBuf,
    out: Output,
    /// Bytes written.
    written: u64,
    /// Each record's (offset, length), for the index.
    records: Vec<(u64, u64)>,
}

enum Output {
    Stream(BufWriter<File>),
    Parquet {
        writer: Box<ArrowWriter<File>>,
        schema: Arc<Schema>,
        carries: Carries,
        rows: Vec<Row>,
    },
}

/// A buffered Parquet row: the image's path (its key), bytes, and label or
/// targets.
struct Row {
    path: String,
    data: Vec<u8>,
    label: Option<i64>,
    targets: Option<String>,
}

fn parquet_err(path: &Path) -> impl FnOnce(parquet::errors::ParquetError) -> PackError + '_ {
    move |e| PackError::Io {
        path: path.to_owned(),
        source: std::io::Error::other(e),
    }
}

/// The fields of Hugging Face's `Image` feature.
fn image_fields() -> Fields {
    Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ])
}

/// Hugging Face's schema of an image classification dataset, or of a
/// detection dataset with a string column of targets JSON.
fn parquet_schema(classes: &[String], carries: Carries) -> Schema {
    let (name, feature, column) = match carries {
        // Without class names (a converted dataset that had none), the
        // label is a plain integer.
        Carries::Labels => (
            "label",
            match classes {
                [] => serde_json::json!({"dtype": "int64", "_type": "Value"}),
                names => serde_json::json!({"names": names, "_type": "ClassLabel"}),
            },
            DataType::Int64,
        ),
        Carries::Targets => (
            TARGETS_COLUMN,
            serde_json::json!({"dtype": "string", "_type": "Value"}),
            DataType::Utf8,
        ),
    };
    let features = serde_json::json!({
        "info": {
            "features": {
                "image": {"_type": "Image"},
                name: feature,
            }
        }
    });
    Schema::new(vec![
        Field::new("image", DataType::Struct(image_fields()), true),
        Field::new(name, column, true),
    ])
    .with_metadata(std::collections::HashMap::from([(
        "huggingface".to_owned(),
        features.to_string(),
    )]))
}

impl ShardWriter {
    /// Starts a shard of `format` at `path` of samples that carry
    /// `carries`; `classes` name the labels (Parquet's metadata).
    pub(super) fn create(
        format: ShardFormat,
        path: &Path,
        classes: &[String],
        carries: Carries,
    ) -> Result<Self, PackError> {
        let file = File::create(path).map_err(io_err(path))?;
        let out = match format {
            ShardFormat::Parquet => {
                let schema = Arc::new(parquet_schema(classes, carries));
                let writer = ArrowWriter::try_new(file, Arc::clone(&schema), None).map_err(parquet_err(path))?;
                Output::Parquet {
                    writer: Box::new(writer),
                    schema,
                    carries,
                    rows: Vec::new(),
                }
            }
            _ => Output::Stream(BufWriter::with_capacity(1 << 20, file)),
        };
        Ok(Self {
            format,
            path: path.to_owned(),
            out,
            written: 0,
            records: Vec::new(),
        })
    }

    /// Appends one sample.
    pub(super) fn add(&mut self, s: &Sample<'_>) -> Result<(), PackError> {
        let bytes = match (&mut self.out, self.format) {
            (Output::Parquet { rows, .. }, _) => {
                rows.push(Row {
                    path: s.key.to_owned(),
                    data: s.data.to_vec(),
                    label: s.label,
                    targets: s.targets.map(|t| String::from_utf8_lossy(t).into_owned()),
                });
                if rows.len() >= PARQUET_ROW_GROUP_ROWS {
                    self.flush_row_group()?;
                }
                return Ok(());
            }
            (Output::Stream(_), ShardFormat::WebDataset) => {
                let mut tar = Vec::with_capacity(s.data.len() + 3072);
                append_member(&mut tar, &format!("{}.{}", s.key, s.ext), s.data);
                if let Some(label) = s.label {
                    append_member(&mut tar, &format!("{}.cls", s.key), label.to_string().as_bytes());
                }
                if let Some(targets) = s.targets {
                    append_member(&mut tar, &format!("{}.json", s.key), targets);
                }
                tar
            }
            (Output::Stream(_), ShardFormat::TfRecord) => stoker_formats::tfrecord::frame(&example(s)),
            (Output::Stream(_), _) => {
                // Unlabelled: -1, as the readers say (pack refuses
                // detection samples here before writing).
                let data = stoker_formats::recordio::image_record(s.label.unwrap_or(-1) as f32, s.id, s.data);
                stoker_formats::recordio::frame(&data)
            }
        };
        let Output::Stream(out) = &mut self.out else {
            return Ok(());
        };
        out.write_all(&bytes).map_err(io_err(&self.path))?;
        self.records.push((self.written, bytes.len() as u64));
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Writes the buffered Parquet rows as one row group.
    fn flush_row_group(&mut self) -> Result<(), PackError> {
        let Output::Parquet {
            writer,
            schema,
            carries,
            rows,
        } = &mut self.out
        else {
            return Ok(());
        };
        if rows.is_empty() {
            return Ok(());
        }
        let taken = std::mem::take(rows);
        let paths = StringArray::from_iter_values(taken.iter().map(|r| r.path.as_str()));
        let bytes = BinaryArray::from_iter_values(taken.iter().map(|r| r.data.as_slice()));
        let second: ArrayRef = match carries {
            Carries::Labels => Arc::new(Int64Array::from_iter(taken.iter().map(|r| r.label))),
            Carries::Targets => Arc::new(StringArray::from_iter(taken.iter().map(|r| r.targets.as_deref()))),
        };
        let image = StructArray::new(image_fields(), vec![Arc::new(bytes) as ArrayRef, Arc::new(paths)], None);
        let batch = RecordBatch::try_new(Arc::clone(schema), vec![Arc::new(image) as ArrayRef, second])
            .map_err(|e| parquet_err(&self.path)(e.into()))?;
        writer.write(&batch).map_err(parquet_err(&self.path))?;
        writer.flush().map_err(parquet_err(&self.path))?;
        Ok(())
    }

    /// Ends the shard: the tar's end, the Parquet footer, or the last
    /// buffered bytes. Returns its size and, for the formats that have
    /// one, its record index.
    pub(super) fn finish(mut self, name: &str) -> Result<(u64, Option<RecordIndex>), PackError> {
        self.flush_row_group()?;
        match self.out {
            Output::Parquet { writer, .. } => {
                writer.close().map_err(parquet_err(&self.path))?;
            }
            Output::Stream(mut out) => {
                if self.format == ShardFormat::WebDataset {
                    out.write_all(&[0u8; 1024]).map_err(io_err(&self.path))?;
                }
                out.flush().map_err(io_err(&self.path))?;
            }
        }
        let size = std::fs::metadata(&self.path).map_err(io_err(&self.path))?.len();
        let index = self.format.index_name(name).map(|index| {
            let text: String = match self.format {
                ShardFormat::RecordIo => self
                    .records
                    .iter()
                    .enumerate()
                    .map(|(i, (offset, _))| format!("{i}\t{offset}\n"))
                    .collect(),
                _ => self
                    .records
                    .iter()
                    .map(|(offset, len)| format!("{offset} {len}\n"))
                    .collect(),
            };
            RecordIndex {
                name: index,
                text: Bytes::from(text),
            }
        });
        Ok((size, index))
    }
}

/// A sample as TensorFlow's ImageNet Example.
fn example(s: &Sample<'_>) -> Vec<u8> {
    let bytes = |v: &[u8]| proto::Feature {
        kind: Some(proto::Kind::BytesList(proto::BytesList {
            value: vec![Bytes::copy_from_slice(v)],
        })),
    };
    let format = if s.ext == "png" { "png" } else { "jpeg" };
    let label = s.label.map(|label| {
        (
            stoker_core::format::DEFAULT_LABEL_FIELD,
            proto::Feature {
                kind: Some(proto::Kind::Int64List(proto::Int64List { value: vec![label] })),
            },
        )
    });
    let feature = [
        (stoker_core::format::DEFAULT_IMAGE_FIELD, bytes(s.data)),
        ("image/format", bytes(format.as_bytes())),
        (stoker_core::format::DEFAULT_KEY_FIELD, bytes(s.key.as_bytes())),
    ]
    .into_iter()
    .chain(label)
    .chain(s.targets.map(|t| (TARGETS_FEATURE, bytes(t))))
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    proto::Example {
        features: Some(proto::Features { feature }),
    }
    .encode_to_vec()
}
