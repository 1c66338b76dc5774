//! The shard-format layer: what the worker's pipeline reads samples
//! through, whatever the format of the shard.

use tokio::io::AsyncRead;

use crate::error::RecordError;
use crate::recordio::RecordIoReader;
use crate::sample::{RawSample, ReadStep};
use crate::start::SampleStart;
use crate::tfrecord::{ExampleFields, ExampleReader};
use crate::wds::SampleReader;

/// A shard's format, with what reading it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardKind {
    /// WebDataset: a tar whose members group into samples; the members
    /// with these extensions are read as fields.
    WebDataset { fields: Vec<String> },
    /// TFRecord of `tf.train.Example`s.
    TfRecord(ExampleFields),
    /// MXNet RecordIO; the offset is added to every label, and
    /// `label_fields` fields get the header's whole label array.
    RecordIo { label_offset: i64, label_fields: usize },
}

/// A shard's samples, read as the shard streams in.
#[derive(Debug)]
pub enum ShardSamples<R> {
    WebDataset(SampleReader<R>),
    TfRecord(ExampleReader<R>),
    RecordIo(RecordIoReader<R>),
}

impl<R: AsyncRead + Unpin> ShardSamples<R> {
    /// Reads `inner`, the shard `name` from `start`, as `kind`. Members or
    /// records over `max_member_bytes` are read past and become skipped
    /// samples.
    pub fn new(kind: &ShardKind, inner: R, name: &str, max_member_bytes: u64, start: SampleStart) -> Self {
        match kind {
            ShardKind::WebDataset { fields } => {
                Self::WebDataset(SampleReader::starting(inner, max_member_bytes, start).with_fields(fields))
            }
            ShardKind::TfRecord(fields) => {
                Self::TfRecord(ExampleReader::new(inner, name, fields.clone(), max_member_bytes, start))
            }
            ShardKind::RecordIo {
                label_offset,
                label_fields,
            } => Self::RecordIo(
                RecordIoReader::new(inner, name, start, max_member_bytes, *label_offset)
                    .with_label_fields(*label_fields),
            ),
        }
    }

    /// Bytes of the shard consumed so far, counted from its beginning.
    pub fn offset(&self) -> u64 {
        match self {
            Self::WebDataset(r) => r.offset(),
            Self::TfRecord(r) => r.offset(),
            Self::RecordIo(r) => r.offset(),
        }
    }

    /// The next sample, or `None` at the end of the shard.
    pub async fn next_sample(&mut self) -> Result<Option<RawSample>, RecordError> {
        match self {
            Self::WebDataset(r) => Ok(r.next_sample().await?),
            Self::TfRecord(r) => Ok(r.next_sample().await?),
            Self::RecordIo(r) => Ok(r.next_sample().await?),
        }
    }

    /// As [`ShardSamples::next_sample`], but a WebDataset image member is
    /// read into memory only once `admit` accepts its size
    /// ([`SampleReader::next_sample_within`]). TFRecord and RecordIO
    /// records are read whole, each under the record size limit, without
    /// asking.
    pub async fn next_sample_within(&mut self, admit: &mut impl FnMut(u64) -> bool) -> Result<ReadStep, RecordError> {
        match self {
            Self::WebDataset(r) => Ok(r.next_sample_within(admit).await?),
            Self::TfRecord(r) => Ok(ReadStep::Sample(r.next_sample().await?)),
            Self::RecordIo(r) => Ok(ReadStep::Sample(r.next_sample().await?)),
        }
    }
}
