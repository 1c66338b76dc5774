//! Where an item's samples come from: a shard streamed through the
//! fuzzed readers of `stoker-formats` (WebDataset, TFRecord, RecordIO),
//! or a Parquet shard read by row groups.

use stoker_formats::sample::RawSample;
use stoker_formats::shard::{SampleStart, ShardError, ShardKind, ShardSamples};
use stoker_formats::tfrecord::ExampleFields;

use super::{Item, ItemError};
use crate::parquet::{ParquetSamples, ParquetShardError};
use crate::storage::{ShardReader, Storage, StorageError};
use stoker_core::{DatasetUri, RecordFields, ShardFormat};

/// An item's samples, in shard order.
pub(crate) enum ItemSamples {
    Stream(ShardSamples<ShardReader>),
    Parquet(Box<ParquetSamples>),
    /// A shard unreadable from its start (a Parquet file without the image
    /// column, say): the error comes as the first read's, so that the item
    /// reports it like any shard that goes bad, and no sample is read.
    Unreadable(Option<SampleError>),
}

/// Why a shard's samples stopped coming.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error(transparent)]
    Shard(#[from] ShardError),
    #[error(transparent)]
    Parquet(#[from] ParquetShardError),
}

impl SampleError {
    /// The transport failed (another attempt may succeed); otherwise the
    /// shard itself is bad from here on.
    pub fn is_io(&self) -> bool {
        match self {
            Self::Shard(e) => e.is_io(),
            Self::Parquet(e) => e.is_io(),
        }
    }
}

/// Which samples of which shard to read, and how.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ShardRead<'a> {
    pub dataset: &'a DatasetUri,
    pub shard: &'a str,
    pub format: ShardFormat,
    pub fields: &'a RecordFields,
    /// Samples from `start` up to `end` (or the shard's end).
    pub start: u64,
    pub end: Option<u64>,
    /// Members or records over this are skipped samples.
    pub max_member_bytes: u64,
}

impl ItemSamples {
    /// Opens the item's samples ([`ItemSamples::open_shard`]).
    pub(crate) async fn open(item: &Item, storage: &Storage, max_member_bytes: u64) -> Result<Self, ItemError> {
        let read = ShardRead {
            dataset: &item.dataset,
            shard: &item.shard,
            format: item.format,
            fields: &item.fields,
            start: item.start,
            end: item.end,
            max_member_bytes,
        };
        Ok(Self::open_shard(read, storage).await?)
    }

    /// Opens a shard's samples. Parquet reads the row groups that hold
    /// them. A sample range of a shard with a record index (RecordIO,
    /// indexed TFRecord) is read from its first record's byte to the byte
    /// after its last one; anything else from the shard's beginning, the
    /// samples before `start` read past.
    pub(crate) async fn open_shard(read: ShardRead<'_>, storage: &Storage) -> Result<Self, StorageError> {
        let fields = read.fields;
        let kind = match read.format {
            ShardFormat::WebDataset => ShardKind::WebDataset,
            ShardFormat::TfRecord => ShardKind::TfRecord(ExampleFields {
                image: fields.image_for(read.format).to_owned(),
                label: fields.label_for(read.format).to_owned(),
                label_offset: fields.label_offset,
                key: stoker_core::format::DEFAULT_KEY_FIELD.to_owned(),
            }),
            ShardFormat::RecordIo => ShardKind::RecordIo {
                label_offset: fields.label_offset,
            },
            ShardFormat::Parquet => return Self::open_parquet(read, storage).await,
        };
        // A gzipped shard's index, if any, counts its records but its
        // offsets are in the decompressed stream: it is read from the start.
        let gzipped = stoker_core::format::gzipped(read.shard);
        let ranged = (read.start > 0 || read.end.is_some()) && !gzipped;
        let offsets = match ranged {
            true => storage.record_offsets(read.dataset, read.shard, read.format).await?,
            false => None,
        };
        let (reader, start) = match offsets {
            Some(offsets) => {
                let (first, last) = stoker_formats::index::byte_range(&offsets, read.start, read.end).map_err(|e| {
                    StorageError::BadRecordIndex {
                        object: read.dataset.join(read.shard),
                        reason: e.to_string(),
                    }
                })?;
                let reader = storage.open_range(read.dataset, read.shard, first, last).await?;
                (
                    reader,
                    SampleStart {
                        position: read.start,
                        offset: first,
                    },
                )
            }
            None => (storage.open(read.dataset, read.shard).await?, SampleStart::default()),
        };
        let reader = if gzipped {
            crate::storage::gunzip(reader)
        } else {
            reader
        };
        Ok(Self::Stream(ShardSamples::new(
            &kind,
            reader,
            read.shard,
            read.max_member_bytes,
            start,
        )))
    }

    /// A Parquet shard's row groups that hold the samples asked for.
    async fn open_parquet(read: ShardRead<'_>, storage: &Storage) -> Result<Self, StorageError> {
        let object = storage.object(read.dataset, read.shard).await?;
        let range = (read.start, read.end);
        match ParquetSamples::open(object, read.shard, read.fields, range, read.max_member_bytes).await {
            Ok(samples) => Ok(Self::Parquet(Box::new(samples))),
            Err(ParquetShardError::Storage(e)) => Err(e),
            Err(e) => Ok(Self::Unreadable(Some(e.into()))),
        }
    }

    /// The next sample, or `None` at the end of what the item reads.
    pub(crate) async fn next_sample(&mut self) -> Result<Option<RawSample>, SampleError> {
        match self {
            Self::Stream(s) => Ok(s.next_sample().await?),
            Self::Parquet(p) => Ok(p.next_sample().await?),
            Self::Unreadable(e) => e.take().map_or(Ok(None), Err),
        }
    }
}
