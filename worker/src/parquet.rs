//! Parquet shards with an image column, as Hugging Face publishes datasets
//! (`{"image": {"bytes", "path"}, "label"}`) or with plain binary images.
//!
//! The one format not in `stoker-formats`: it needs the `parquet` and
//! `arrow` crates, too heavy for the fuzz builds, and it seeks rather than
//! streams. It depends on storage and `memory`, never the other way;
//! [`row_count`] reads a footer's row count for `catalog`'s listing.
//!
//! A shard is read through the `parquet` crate's async reader over our own
//! ranged reads ([`Object`]): the footer first, then only the image and
//! label columns of the row groups that hold the item's samples, one row
//! group in memory at a time, decoded on a blocking thread in batches of
//! [`BATCH_ROWS`] rows. A
//! rank's sample range therefore reads its row groups and the footer, not
//! the file.
//!
//! - The image column is binary, or a struct with a binary `bytes` field
//!   (Hugging Face's `Image` feature) and an optional string `path`.
//! - The label column, when the shard has it, holds integers; a null label
//!   is unlabelled (-1). Without the column every sample is unlabelled,
//!   unless `--label-key` named it: then its absence is an error.
//! - The key is the image's `path` when it has one, else `<shard>:<row>`.
//!
//! A row group is held in the worker's memory budget: before it is fetched
//! the reader asks for what fetching and decoding its columns need (their
//! compressed and uncompressed sizes, from the footer), keeps what the
//! decoded batches hold once decoded, and releases it when its last row has
//! been read. Rows' images are copied out of the batches, so a sample
//! outlives its row group with only its own bytes (reserved by the sample).
//!
//! A shard without the image column, with columns of other types, or with
//! a row group too large to hold (more than the whole budget) is
//! unreadable, and the error names the column or the row group. A row whose
//! image is null, empty or not a JPEG or PNG is a skipped sample with its
//! reason.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStream, ParquetRecordBatchStreamBuilder};
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use stoker_core::{RecordFields, ShardFormat};
use stoker_formats::image::sniff;
use stoker_formats::sample::{MemberProblem, RawField, RawSample, RawValue, ReadStep};

use crate::memory::Reservation;
use stoker_storage::{Object, StorageError};

/// Bytes read from a file's end in the first request for its footer: most
/// footers fit, so one request does.
pub const FOOTER_PREFETCH: usize = 64 << 10;
/// Rows decoded at once.
pub const BATCH_ROWS: usize = 64;
/// The most bytes a row group may need to be read (its columns read,
/// fetched and decoded) outside a worker's budget (`pack`): the reader
/// keeps one row group in memory.
pub const MAX_ROW_GROUP_BYTES: u64 = 1 << 30;

/// What bounds the row group a reader holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowGroupLimit {
    /// The worker's memory budget, of this many bytes.
    Budget(u64),
    /// A fixed number of bytes (`pack`).
    Fixed(u64),
}

impl RowGroupLimit {
    fn bytes(self) -> u64 {
        match self {
            Self::Budget(b) | Self::Fixed(b) => b,
        }
    }
}

impl std::fmt::Display for RowGroupLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Budget(b) => write!(f, "the worker's whole memory budget of {b} bytes"),
            Self::Fixed(b) => write!(f, "the limit of {b} bytes"),
        }
    }
}

/// Why a Parquet shard could not be read (further).
#[derive(Debug, thiserror::Error)]
pub enum ParquetShardError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("not a readable Parquet file: {0}")]
    Parquet(String),
    /// The columns are missing or of the wrong type.
    #[error("{0}")]
    Schema(String),
    #[error("row group {index} needs {bytes} bytes to fetch and decode the columns read, more than {limit}")]
    RowGroupTooLarge {
        index: usize,
        bytes: u64,
        limit: RowGroupLimit,
    },
}

impl ParquetShardError {
    /// Transport trouble, worth another attempt; the rest is the shard's.
    pub fn is_io(&self) -> bool {
        matches!(self, Self::Storage(e) if e.is_transient())
    }
}

/// A storage error comes back out of the parquet crate as itself.
fn from_parquet(e: ParquetError) -> ParquetShardError {
    match e {
        ParquetError::External(boxed) => match boxed.downcast::<StorageError>() {
            Ok(storage) => ParquetShardError::Storage(*storage),
            Err(other) => ParquetShardError::Parquet(other.to_string()),
        },
        other => ParquetShardError::Parquet(other.to_string()),
    }
}

/// The parquet crate's view of one [`Object`].
struct ObjectFile(Object);

impl AsyncFileReader for ObjectFile {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        let object = self.0.clone();
        async move {
            object
                .read(range)
                .await
                .map_err(|e| ParquetError::External(Box::new(e)))
        }
        .boxed()
    }

    /// The column chunks of a row group, fetched at once.
    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        let object = self.0.clone();
        async move {
            futures::future::try_join_all(ranges.into_iter().map(|r| {
                let object = object.clone();
                async move { object.read(r).await.map_err(|e| ParquetError::External(Box::new(e))) }
            }))
            .await
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let size = self.0.size();
            let metadata = ParquetMetaDataReader::new()
                .with_prefetch_hint(Some(FOOTER_PREFETCH))
                .load_and_finish(self, size)
                .await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

/// What reading a row group's columns in `mask` needs, by its footer: the
/// column chunks fetched (compressed) and decoded (uncompressed), both held
/// while the chunks decode.
fn row_group_need(group: &parquet::file::metadata::RowGroupMetaData, mask: &ProjectionMask) -> u64 {
    group
        .columns()
        .iter()
        .enumerate()
        .filter(|(leaf, _)| mask.leaf_included(*leaf))
        .map(|(_, c)| {
            let fetched = u64::try_from(c.compressed_size()).unwrap_or(0);
            let decoded = u64::try_from(c.uncompressed_size()).unwrap_or(0);
            fetched.saturating_add(decoded)
        })
        .fold(0u64, u64::saturating_add)
}

/// Rows in the Parquet shard `object`, from its footer.
pub async fn row_count(object: Object) -> Result<u64, ParquetShardError> {
    let metadata = ObjectFile(object).get_metadata(None).await.map_err(from_parquet)?;
    Ok(u64::try_from(metadata.file_metadata().num_rows()).unwrap_or(0))
}

fn is_binary(t: &DataType) -> bool {
    matches!(t, DataType::Binary | DataType::LargeBinary | DataType::BinaryView)
}

/// Checks the image column's type: binary, or a struct with a binary
/// `bytes` field (and, when it has one, a string `path`).
fn check_image_type(name: &str, t: &DataType) -> Result<(), ParquetShardError> {
    let ok = match t {
        t if is_binary(t) => true,
        DataType::Struct(fields) => {
            let bytes = fields.iter().find(|f| f.name() == "bytes");
            let path = fields.iter().find(|f| f.name() == "path");
            bytes.is_some_and(|f| is_binary(f.data_type()))
                && path
                    .is_none_or(|f| matches!(f.data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View))
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(ParquetShardError::Schema(format!(
            "column {name} is {t}, not binary or a struct of binary bytes and a string path"
        )))
    }
}

/// A copy of the binary cell at `row`. A copy, not a slice of the
/// column's buffer: a slice would keep the whole batch alive as long as its
/// sample, after the row group's budget is released.
fn binary_at(col: &ArrayRef, row: usize) -> Option<Bytes> {
    if col.is_null(row) {
        return None;
    }
    if let Some(a) = col.as_binary_opt::<i32>() {
        Some(Bytes::copy_from_slice(a.value(row)))
    } else if let Some(a) = col.as_binary_opt::<i64>() {
        Some(Bytes::copy_from_slice(a.value(row)))
    } else {
        col.as_binary_view_opt().map(|a| Bytes::copy_from_slice(a.value(row)))
    }
}

fn string_at(col: &ArrayRef, row: usize) -> Option<&str> {
    if col.is_null(row) {
        return None;
    }
    if let Some(a) = col.as_string_opt::<i32>() {
        Some(a.value(row))
    } else if let Some(a) = col.as_string_opt::<i64>() {
        Some(a.value(row))
    } else {
        col.as_string_view_opt().map(|a| a.value(row))
    }
}

/// The integer at `row`, `None` when null.
fn integer_at(col: &ArrayRef, row: usize) -> Option<Result<i64, String>> {
    if col.is_null(row) {
        return None;
    }
    fn wide<T: TryInto<i64> + std::fmt::Display + Copy>(v: T) -> Result<i64, String> {
        v.try_into().map_err(|_| format!("label {v} does not fit in 64 bits"))
    }
    Some(match col.data_type() {
        DataType::Int8 => Ok(i64::from(col.as_primitive::<Int8Type>().value(row))),
        DataType::Int16 => Ok(i64::from(col.as_primitive::<Int16Type>().value(row))),
        DataType::Int32 => Ok(i64::from(col.as_primitive::<Int32Type>().value(row))),
        DataType::Int64 => Ok(col.as_primitive::<Int64Type>().value(row)),
        DataType::UInt8 => Ok(i64::from(col.as_primitive::<UInt8Type>().value(row))),
        DataType::UInt16 => Ok(i64::from(col.as_primitive::<UInt16Type>().value(row))),
        DataType::UInt32 => Ok(i64::from(col.as_primitive::<UInt32Type>().value(row))),
        DataType::UInt64 => wide(col.as_primitive::<UInt64Type>().value(row)),
        other => Err(format!("label is {other}, not an integer")),
    })
}

/// A Parquet shard's samples, row group by row group.
pub struct ParquetSamples {
    stream: ParquetRecordBatchStream<ObjectFile>,
    shard: String,
    image: String,
    /// The label column, when the shard has one.
    label: Option<String>,
    label_offset: i64,
    /// Columns read as the samples' requested fields, in order.
    extra: Vec<String>,
    max_image_bytes: u64,
    /// The batch being read, and those decoded after it.
    batch: Option<RecordBatch>,
    decoded: VecDeque<RecordBatch>,
    /// The next row of `batch`.
    row: usize,
    /// The rows still to come, as (position of the next one, rows left) of
    /// each selected row group, in file order.
    groups: VecDeque<(u64, u64)>,
    /// The bytes each selected row group not yet fetched needs, in order.
    needs: VecDeque<u64>,
    /// The budget the row group being read holds.
    held: Reservation,
}

impl std::fmt::Debug for ParquetSamples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetSamples")
            .field("shard", &self.shard)
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

impl ParquetSamples {
    /// Opens the Parquet shard `object` (named `shard`) for the samples
    /// from `start` up to `end` (or its end): reads its footer, checks the
    /// columns `fields` names, and picks the row groups that hold them.
    /// Images over `max_image_bytes` become skipped samples; a row group
    /// that needs more than `limit` to read makes the shard unreadable.
    pub async fn open(
        object: Object,
        shard: &str,
        fields: &RecordFields,
        extra: &[String],
        (start, end): (u64, Option<u64>),
        max_image_bytes: u64,
        limit: RowGroupLimit,
    ) -> Result<Self, ParquetShardError> {
        let builder = ParquetRecordBatchStreamBuilder::new(ObjectFile(object))
            .await
            .map_err(from_parquet)?;
        let schema = Arc::clone(builder.schema());
        let image = fields.image_for(ShardFormat::Parquet).to_owned();
        let columns = || {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            names.join(", ")
        };
        let Some((image_index, image_field)) = schema.column_with_name(&image) else {
            return Err(ParquetShardError::Schema(format!(
                "no image column {image} (columns: {}); name it with --image-key",
                columns()
            )));
        };
        check_image_type(&image, image_field.data_type())?;
        let label_name = fields.label_for(ShardFormat::Parquet);
        let label_index = match schema.column_with_name(label_name) {
            Some((i, f)) if f.data_type().is_integer() => Some(i),
            Some((_, f)) => {
                return Err(ParquetShardError::Schema(format!(
                    "column {label_name} is {}, not an integer label",
                    f.data_type()
                )));
            }
            None if fields.label.is_some() => {
                return Err(ParquetShardError::Schema(format!(
                    "no label column {label_name} (columns: {})",
                    columns()
                )));
            }
            None => None,
        };
        // A requested column the shard lacks leaves that field missing in
        // every row (skipped as missing_field, or None when optional), as a
        // WebDataset sample without the member.
        let extra_indices: Vec<usize> = extra.iter().filter_map(|c| schema.index_of(c).ok()).collect();
        let mask = ProjectionMask::roots(
            builder.parquet_schema(),
            [image_index].into_iter().chain(label_index).chain(extra_indices),
        );
        let mut selected = Vec::new();
        let mut groups = VecDeque::new();
        let mut needs = VecDeque::new();
        let mut first = 0u64;
        for (index, group) in builder.metadata().row_groups().iter().enumerate() {
            let rows = u64::try_from(group.num_rows()).unwrap_or(0);
            let (lo, hi) = (first, first + rows);
            first = hi;
            if rows == 0 || hi <= start || end.is_some_and(|end| lo >= end) {
                continue;
            }
            let bytes = row_group_need(group, &mask);
            if bytes > limit.bytes() {
                return Err(ParquetShardError::RowGroupTooLarge { index, bytes, limit });
            }
            selected.push(index);
            groups.push_back((lo, rows));
            needs.push_back(bytes);
        }
        let stream = builder
            .with_projection(mask)
            .with_row_groups(selected)
            .with_batch_size(BATCH_ROWS)
            .build()
            .map_err(from_parquet)?;
        Ok(Self {
            stream,
            shard: shard.to_owned(),
            image,
            label: label_index.map(|_| label_name.to_owned()),
            label_offset: fields.label_offset,
            extra: extra.to_vec(),
            max_image_bytes,
            batch: None,
            decoded: VecDeque::new(),
            row: 0,
            groups,
            needs,
            held: Reservation::default(),
        })
    }

    /// The next sample, or `None` after the last selected row group, read
    /// outside any budget.
    pub async fn next_sample(&mut self) -> Result<Option<RawSample>, ParquetShardError> {
        loop {
            if let ReadStep::Sample(s) = self.next_sample_within(&mut |_| Some(Reservation::default())).await? {
                return Ok(s);
            }
        }
    }

    /// The next sample, or `None` after the last selected row group. The
    /// next row group is fetched only once `admit` gives a reservation for
    /// what it needs; without one nothing is read and the answer is
    /// [`ReadStep::Blocked`]. The row group's reservation is released when its
    /// last row has been read.
    pub async fn next_sample_within(
        &mut self,
        admit: &mut impl FnMut(u64) -> Option<Reservation>,
    ) -> Result<ReadStep, ParquetShardError> {
        loop {
            // A batch read to its end is dropped here.
            if let Some(batch) = self.batch.take()
                && self.row < batch.num_rows()
            {
                let position = self.next_position();
                let sample = self.sample(&batch, self.row, position);
                self.row += 1;
                self.batch = Some(batch);
                return Ok(ReadStep::Sample(Some(sample)));
            }
            if let Some(batch) = self.decoded.pop_front() {
                self.batch = Some(batch);
                self.row = 0;
                continue;
            }
            // The row group's batches are all read and dropped.
            self.held = Reservation::default();
            let Some(&need) = self.needs.front() else {
                return Ok(ReadStep::Sample(None));
            };
            let Some(mut held) = admit(need) else {
                return Ok(ReadStep::Blocked { bytes: need });
            };
            self.needs.pop_front();
            // The next row group: fetched here, decoded on a blocking
            // thread (page decoding and decompression are CPU work that
            // must not hold up the runtime; a panic in the decoder comes
            // back as an error there).
            let Some(reader) = self.stream.next_row_group().await.map_err(from_parquet)? else {
                return Ok(ReadStep::Sample(None));
            };
            let decoded = tokio::task::spawn_blocking(move || reader.collect::<Result<Vec<RecordBatch>, _>>())
                .await
                .map_err(|e| ParquetShardError::Parquet(format!("the row group's decoding failed: {e}")))?
                .map_err(|e| ParquetShardError::Parquet(e.to_string()))?;
            // The fetched column chunks are gone: only the batches stay.
            let decoded_bytes: usize = decoded.iter().map(RecordBatch::get_array_memory_size).sum();
            self.held = held.keep(decoded_bytes as u64);
            self.decoded = decoded.into();
        }
    }

    /// The position in the shard of the next row read.
    fn next_position(&mut self) -> u64 {
        let Some((next, left)) = self.groups.front_mut() else {
            // More rows than the footer said: number them on.
            return u64::MAX;
        };
        let position = *next;
        *next += 1;
        *left -= 1;
        if *left == 0 {
            self.groups.pop_front();
        }
        position
    }

    fn sample(&self, batch: &RecordBatch, row: usize, position: u64) -> RawSample {
        let (bytes, path) = match batch.column_by_name(&self.image) {
            Some(col) => match col.as_struct_opt() {
                Some(s) if s.is_null(row) => (None, None),
                Some(s) => (
                    s.column_by_name("bytes").and_then(|c| binary_at(c, row)),
                    s.column_by_name("path").and_then(|c| string_at(c, row)),
                ),
                None => (binary_at(col, row), None),
            },
            None => (None, None),
        };
        let key = match path {
            Some(p) if !p.is_empty() => p.to_owned(),
            _ => format!("{}:{position}", self.shard),
        };
        let image = match bytes {
            None => Err(MemberProblem::MissingField {
                field: self.image.clone(),
            }),
            Some(b) if b.is_empty() => Err(MemberProblem::Empty {
                ext: self.image.clone(),
            }),
            Some(b) if b.len() as u64 > self.max_image_bytes => Err(MemberProblem::TooLarge {
                ext: self.image.clone(),
                size: b.len() as u64,
                limit: self.max_image_bytes,
            }),
            Some(b) => match sniff(&b) {
                Some(kind) => Ok((kind, b)),
                None => Err(MemberProblem::NotImage {
                    field: self.image.clone(),
                }),
            },
        };
        let label = match self.label.as_ref().and_then(|l| batch.column_by_name(l)) {
            None => Ok(-1),
            Some(col) => match integer_at(col, row) {
                None => Ok(-1),
                Some(Ok(v)) => v
                    .checked_add(self.label_offset)
                    .ok_or_else(|| format!("label {v} + offset {} overflows", self.label_offset)),
                Some(Err(e)) => Err(e),
            },
        };
        RawSample {
            key,
            position,
            image,
            label,
            fields: self
                .extra
                .iter()
                .map(|name| match batch.column_by_name(name) {
                    Some(col) => cell(name, col, row),
                    None => Ok(None),
                })
                .collect(),
        }
    }
}

/// A cell of a requested column as a field's stored value: `None` when
/// null. Integers, numbers, strings, binaries (and a Hugging Face `Image`
/// struct's bytes), booleans as 0 or 1, and lists of integers or numbers.
fn cell(name: &str, col: &ArrayRef, row: usize) -> RawField {
    if col.is_null(row) {
        return Ok(None);
    }
    let unreadable = |what: &DataType| MemberProblem::Unreadable {
        field: format!("column {name}"),
        what: what.to_string(),
    };
    let dt = col.data_type();
    let value = match dt {
        DataType::Boolean => RawValue::Int(i64::from(col.as_boolean().value(row))),
        t if t.is_integer() => match integer_at(col, row) {
            Some(Ok(v)) => RawValue::Int(v),
            Some(Err(_)) => return Err(unreadable(t)),
            None => return Ok(None),
        },
        DataType::Float16 | DataType::Float32 | DataType::Float64 => match float_at(col, row) {
            Some(v) => RawValue::Float(v),
            None => return Err(unreadable(dt)),
        },
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => RawValue::Str(Bytes::copy_from_slice(
            string_at(col, row).unwrap_or_default().as_bytes(),
        )),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => match binary_at(col, row) {
            Some(b) => RawValue::Bytes(b),
            None => return Ok(None),
        },
        DataType::Struct(_) => match col.as_struct().column_by_name("bytes").and_then(|c| binary_at(c, row)) {
            Some(b) => RawValue::Bytes(b),
            None => return Err(unreadable(dt)),
        },
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(_, _) => {
            let items: ArrayRef = match dt {
                DataType::List(_) => col.as_list::<i32>().value(row),
                DataType::LargeList(_) => col.as_list::<i64>().value(row),
                _ => col.as_fixed_size_list().value(row),
            };
            let it = items.data_type();
            if it.is_integer() {
                let ints: Option<Vec<i64>> = (0..items.len())
                    .map(|i| integer_at(&items, i).and_then(Result::ok))
                    .collect();
                RawValue::Ints(ints.ok_or_else(|| unreadable(dt))?)
            } else if matches!(it, DataType::Float16 | DataType::Float32 | DataType::Float64) {
                let floats: Option<Vec<f64>> = (0..items.len()).map(|i| float_at(&items, i)).collect();
                RawValue::Floats(floats.ok_or_else(|| unreadable(dt))?)
            } else {
                return Err(unreadable(dt));
            }
        }
        other => return Err(unreadable(other)),
    };
    Ok(Some(value))
}

/// The number at `row` of a float column, `None` when null or not one.
fn float_at(col: &ArrayRef, row: usize) -> Option<f64> {
    if col.is_null(row) {
        return None;
    }
    match col.data_type() {
        DataType::Float16 => Some(f64::from(col.as_primitive::<Float16Type>().value(row))),
        DataType::Float32 => Some(f64::from(col.as_primitive::<Float32Type>().value(row))),
        DataType::Float64 => Some(col.as_primitive::<Float64Type>().value(row)),
        _ => None,
    }
}
