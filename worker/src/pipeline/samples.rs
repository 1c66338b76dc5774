//! Where an item's samples come from: a shard streamed through the
//! fuzzed readers of `stoker-formats` (WebDataset, TFRecord, RecordIO),
//! or a Parquet shard read by row groups.
//!
//! Read within the worker's memory budget ([`ItemSamples::next_within`]):
//! a WebDataset image member is reserved before it is read, and the
//! reservation travels with its sample; a Parquet row group is reserved
//! before it is fetched, and released once its last row is read. Without
//! room, `next_within` reads nothing and says `Read::Blocked`: the item
//! collects its own samples in flight first, or sends what it holds,
//! waits, and [`ItemSamples::grant`]s.
//!
//! A sample range of a shard with a record index (not gzipped) is opened
//! at its first record's byte and read to the byte after its last (a
//! ranged GET on S3). Samples carry their position in the shard (the readers
//! number them from where they start); the item passes over those before
//! its `start` without decoding them and stops reading at its `end`. A
//! shard unreadable from its start gives its error as the first read's,
//! so the item reports it as a shard error like any other.

use std::mem::take;

use stoker_formats::sample::{RawSample, ReadStep};
use stoker_formats::shard::{ShardKind, ShardSamples};
use stoker_formats::start::SampleStart;
use stoker_formats::tfrecord::ExampleFields;

use super::types::{Item, ItemError, SampleError};
use crate::memory::{MemoryBudget, Reservation};
use crate::parquet::{ParquetSamples, ParquetShardError, RowGroupLimit};
use stoker_core::{DatasetUri, FieldSpec, RecordFields, ShardFormat};
use stoker_storage::{ShardReader, Storage, StorageError};

/// An item's samples, in shard order, with the budget they hold.
pub struct ItemSamples {
    source: Source,
    /// Reserved for the sample being read (its image member), handed out
    /// with it.
    held: Reservation,
    /// Reserved by the item for what the reader said it was blocked on
    /// ([`ItemSamples::grant`]), used at the reader's next ask.
    granted: Reservation,
}

impl std::fmt::Debug for ItemSamples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = match &self.source {
            Source::Stream(_) => "stream",
            Source::Parquet(_) => "parquet",
            Source::Unreadable(_) => "unreadable",
        };
        f.debug_struct("ItemSamples")
            .field("source", &source)
            .field("held", &self.held.bytes())
            .field("granted", &self.granted.bytes())
            .finish()
    }
}

enum Source {
    /// Boxed: a reader's buffers and state outweigh the other variants.
    Stream(Box<ShardSamples<ShardReader>>),
    Parquet(Box<ParquetSamples>),
    /// A shard unreadable from its start (a Parquet file without the image
    /// column, say): the error comes as the first read's, so that the item
    /// reports it like any shard that goes bad, and no sample is read.
    Unreadable(Option<SampleError>),
}

/// What [`ItemSamples::next_within`] got to.
pub(crate) enum Read {
    /// A sample, with the budget its bytes have held since they were read
    /// (carried into its own reservation).
    Sample(RawSample, Reservation),
    /// The reader needs `bytes` of the budget before it reads on, and they
    /// are not free: ask again once they may be, or [`ItemSamples::grant`]
    /// them.
    Blocked(u64),
    /// No sample is left.
    End,
}

/// Which samples of which shard to read, and how.
#[derive(Clone, Copy, Debug)]
pub struct ShardRead<'a> {
    pub dataset: &'a DatasetUri,
    pub shard: &'a str,
    pub format: ShardFormat,
    pub record: &'a RecordFields,
    /// The other fields to read with each sample (their sources).
    pub fields: &'a [FieldSpec],
    /// Samples from `start` up to `end` (or the shard's end).
    pub start: u64,
    pub end: Option<u64>,
    /// Members or records over this are skipped samples.
    pub max_member_bytes: u64,
    /// A Parquet row group that needs more bytes than this to read is the
    /// shard's error.
    pub row_group_limit: RowGroupLimit,
}

impl ItemSamples {
    /// Opens the item's samples ([`ItemSamples::open_shard`]), to be read
    /// within `budget`: a member or a row group that could never fit it is
    /// a skipped sample or the shard's error.
    pub(crate) async fn open(
        item: &Item,
        storage: &Storage,
        max_member_bytes: u64,
        budget: &MemoryBudget,
    ) -> Result<Self, ItemError> {
        let read = ShardRead {
            dataset: &item.dataset,
            shard: &item.shard,
            format: item.format,
            record: &item.record,
            fields: &item.fields,
            start: item.start,
            end: item.end,
            max_member_bytes: max_member_bytes.min(budget.capacity()),
            row_group_limit: RowGroupLimit::Budget(budget.capacity()),
        };
        Ok(Self::open_shard(read, storage).await?)
    }

    fn new(source: Source) -> Self {
        Self {
            source,
            held: Reservation::default(),
            granted: Reservation::default(),
        }
    }

    /// Opens a shard's samples. Parquet reads the row groups that hold
    /// them. A sample range of a shard with a record index (RecordIO,
    /// indexed TFRecord) is read from its first record's byte to the byte
    /// after its last one; anything else from the shard's beginning, the
    /// samples before `start` read past.
    pub async fn open_shard(read: ShardRead<'_>, storage: &Storage) -> Result<Self, StorageError> {
        let record = read.record;
        let sources = || read.fields.iter().map(|f| f.source.clone()).collect();
        let kind = match read.format {
            ShardFormat::WebDataset => ShardKind::WebDataset { fields: sources() },
            ShardFormat::TfRecord => ShardKind::TfRecord(ExampleFields {
                image: record.image_for(read.format).to_owned(),
                label: record.label_for(read.format).to_owned(),
                label_offset: record.label_offset,
                key: stoker_core::format::DEFAULT_KEY_FIELD.to_owned(),
                extra: sources(),
            }),
            ShardFormat::RecordIo => ShardKind::RecordIo {
                label_offset: record.label_offset,
                label_fields: read.fields.len(),
            },
            ShardFormat::Parquet => return Self::open_parquet(read, storage).await.map(Self::new),
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
            stoker_storage::gunzip(reader)
        } else {
            reader
        };
        Ok(Self::new(Source::Stream(Box::new(ShardSamples::new(
            &kind,
            reader,
            read.shard,
            read.max_member_bytes,
            start,
        )))))
    }

    /// A Parquet shard's row groups that hold the samples asked for.
    async fn open_parquet(read: ShardRead<'_>, storage: &Storage) -> Result<Source, StorageError> {
        let object = storage.object(read.dataset, read.shard).await?;
        let range = (read.start, read.end);
        let opened = ParquetSamples::open(
            object,
            read.shard,
            read.record,
            &read.fields.iter().map(|f| f.source.clone()).collect::<Vec<_>>(),
            range,
            read.max_member_bytes,
            read.row_group_limit,
        )
        .await;
        match opened {
            Ok(samples) => Ok(Source::Parquet(Box::new(samples))),
            Err(ParquetShardError::Storage(e)) => Err(e),
            Err(e) => Ok(Source::Unreadable(Some(e.into()))),
        }
    }

    /// The next sample, or `None` at the end of what the item reads, read
    /// outside any budget (`pack`, and `Read` items, which hold one sample
    /// at a time).
    pub async fn next_sample(&mut self) -> Result<Option<RawSample>, SampleError> {
        let mut admit = |_| Some(Reservation::default());
        loop {
            match read(&mut self.source, &mut self.held, &mut admit).await? {
                Read::Sample(raw, _) => return Ok(Some(raw)),
                Read::End => return Ok(None),
                // Never: every ask is admitted.
                Read::Blocked(_) => continue,
            }
        }
    }

    /// The next sample, reading only what `budget` has room for: a
    /// WebDataset image member is reserved before it is read (the sample
    /// comes with that reservation), a Parquet row group before it is
    /// fetched. When the room is not free, nothing is read and the answer
    /// is [`Read::Blocked`].
    pub(crate) async fn next_within(&mut self, budget: &MemoryBudget) -> Result<Read, SampleError> {
        let Self { source, held, granted } = self;
        let mut admit = |bytes| match take(granted) {
            r if r.bytes() > 0 => Some(r),
            _ => budget.try_reserve(bytes),
        };
        read(source, held, &mut admit).await
    }

    /// Gives the reader `reservation`, which the item waited for after
    /// [`Read::Blocked`]: its next ask takes it.
    pub(crate) fn grant(&mut self, reservation: Reservation) {
        self.granted.absorb(reservation);
    }
}

/// The next sample of `source`, asking `admit` for the budget of what it
/// reads into memory; `held` gathers what the sample being read holds.
async fn read(
    source: &mut Source,
    held: &mut Reservation,
    admit: &mut impl FnMut(u64) -> Option<Reservation>,
) -> Result<Read, SampleError> {
    let step = match source {
        Source::Stream(s) => {
            let mut take_into_held = |bytes| match admit(bytes) {
                Some(r) => {
                    held.absorb(r);
                    true
                }
                None => false,
            };
            s.next_sample_within(&mut take_into_held).await?
        }
        Source::Parquet(p) => p.next_sample_within(admit).await?,
        Source::Unreadable(e) => match e.take() {
            Some(e) => return Err(e),
            None => ReadStep::Sample(None),
        },
    };
    Ok(match step {
        ReadStep::Sample(Some(raw)) => Read::Sample(raw, take(held)),
        ReadStep::Sample(None) => Read::End,
        ReadStep::Blocked { bytes } => Read::Blocked(bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::RESERVE;
    use crate::parquet::MAX_ROW_GROUP_BYTES;
    use crate::pipeline::test_shards::{parquet_shard as write_parquet, tar};

    async fn open(dataset: &DatasetUri, shard: &str, format: ShardFormat, budget: &MemoryBudget) -> ItemSamples {
        let fields = RecordFields::default();
        let read = ShardRead {
            dataset,
            shard,
            format,
            record: &fields,
            fields: &[],
            start: 0,
            end: None,
            max_member_bytes: 64 << 20,
            row_group_limit: RowGroupLimit::Budget(budget.capacity()),
        };
        ItemSamples::open_shard(read, &Storage::new()).await.unwrap()
    }

    #[tokio::test]
    async fn a_member_is_reserved_before_it_is_read_and_its_sample_carries_it() {
        let dir = tempfile::tempdir().unwrap();
        let shard = tar(&[
            ("a.jpg", &[1u8; 300 << 10]),
            ("a.cls", b"1"),
            ("b.jpg", &[2u8; 600 << 10]),
        ]);
        std::fs::write(dir.path().join("s.tar"), shard).unwrap();
        let uri = DatasetUri::Local(dir.path().to_owned());
        let budget = MemoryBudget::for_limit(RESERVE + (1 << 20));
        let mut samples = open(&uri, "s.tar", ShardFormat::WebDataset, &budget).await;
        let Read::Sample(a, a_held) = samples.next_within(&budget).await.unwrap() else {
            panic!("no first sample");
        };
        assert_eq!(a.key, "a");
        assert_eq!(a_held.bytes(), 300 << 10, "its image's bytes, reserved at read");
        assert_eq!(budget.used(), 300 << 10);
        // b's 600 KiB do not fit beside a's 300 KiB and 200 KiB held
        // elsewhere: nothing is read, and the reader asks for them again.
        let elsewhere = budget.try_reserve(200 << 10).unwrap();
        for _ in 0..2 {
            assert!(matches!(samples.next_within(&budget).await.unwrap(), Read::Blocked(n) if n == 600 << 10));
        }
        // The item waits for them and grants them to the reader.
        drop(elsewhere);
        samples.grant(budget.try_reserve(600 << 10).unwrap());
        let Read::Sample(b, b_held) = samples.next_within(&budget).await.unwrap() else {
            panic!("no second sample");
        };
        assert_eq!((b.key.as_str(), b_held.bytes()), ("b", 600 << 10));
        assert_eq!(budget.used(), 900 << 10, "the grant was used, not reserved again");
        assert!(matches!(samples.next_within(&budget).await.unwrap(), Read::End));
        drop((a_held, b_held));
        assert_eq!(budget.used(), 0);
    }

    /// 250 JPEGs of about 10 KB as Parquet, as `stoker pack` writes them:
    /// three row groups (100 rows each, the last 50), each needing about
    /// 2 MB to read.
    fn parquet_shard(dir: &std::path::Path) -> (DatasetUri, String) {
        let images: Vec<(String, Vec<u8>)> = (0..250u64)
            .map(|i| {
                let img = stoker_synth::procedural(96, 96, i);
                (format!("a/{i:03}"), stoker_synth::encode_jpeg(&img, 95).unwrap())
            })
            .collect();
        let name = "shard-000000.parquet";
        write_parquet(&dir.join(name), &images, 100);
        (DatasetUri::Local(dir.to_owned()), name.to_owned())
    }

    #[tokio::test]
    async fn a_parquet_row_group_is_held_in_the_budget_while_its_rows_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let (uri, shard) = parquet_shard(dir.path());
        let budget = MemoryBudget::for_limit(RESERVE + (64 << 20));
        let mut samples = open(&uri, &shard, ShardFormat::Parquet, &budget).await;
        // All but 1 MiB of the budget taken: no row group fits.
        let elsewhere = budget.try_reserve(63 << 20).unwrap();
        let need = match samples.next_within(&budget).await.unwrap() {
            Read::Blocked(need) => need,
            _ => panic!("a row group was read without room for it"),
        };
        assert!(need > 1 << 20, "a row group needs {need} bytes");
        drop(elsewhere);
        let elsewhere = budget.try_reserve(8 << 20).unwrap();
        let mut rows = Vec::new();
        let mut peak = 0;
        loop {
            match samples.next_within(&budget).await.unwrap() {
                Read::Sample(raw, held) => {
                    assert_eq!(held.bytes(), 0, "a row's bytes are the row group's");
                    // The row group's decoded batches, not the fetched chunks too.
                    let group = budget.used() - (8 << 20);
                    assert!(group > 0 && group < need, "{group} of {need}");
                    peak = peak.max(group);
                    rows.push(raw);
                }
                Read::End => break,
                Read::Blocked(n) => panic!("blocked on {n} bytes with the room free"),
            }
        }
        assert_eq!(rows.len(), 250);
        assert!(peak > 100 * 1000, "a row group's batches hold its images: {peak}");
        drop(elsewhere);
        assert_eq!(budget.used(), 0, "the last row group went with its last row");
        // The rows own their bytes (copies): they outlive the row group.
        assert!(rows.iter().all(|r| r.image.as_ref().is_ok_and(|(_, b)| b.len() > 1000)));
    }

    #[tokio::test]
    async fn a_parquet_row_group_larger_than_the_whole_budget_is_the_shards_error() {
        let dir = tempfile::tempdir().unwrap();
        let (uri, shard) = parquet_shard(dir.path());
        let budget = MemoryBudget::for_limit(RESERVE + (1 << 20));
        let mut samples = open(&uri, &shard, ShardFormat::Parquet, &budget).await;
        let err = match samples.next_within(&budget).await {
            Err(e) => e,
            Ok(_) => panic!("a row group over the budget was read"),
        };
        assert!(!err.is_io(), "the shard's error, not the transport's");
        let text = err.to_string();
        assert!(
            text.starts_with("row group 0 needs ")
                && text.ends_with("more than the worker's whole memory budget of 1048576 bytes"),
            "{text}"
        );
        assert_eq!(budget.used(), 0);
        // Outside a worker (pack), the fixed limit applies.
        let fields = RecordFields::default();
        let read = ShardRead {
            dataset: &uri,
            shard: &shard,
            format: ShardFormat::Parquet,
            record: &fields,
            fields: &[],
            start: 0,
            end: None,
            max_member_bytes: 64 << 20,
            row_group_limit: RowGroupLimit::Fixed(MAX_ROW_GROUP_BYTES),
        };
        let mut all = ItemSamples::open_shard(read, &Storage::new()).await.unwrap();
        let mut n = 0;
        while all.next_sample().await.unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, 250);
    }
}
