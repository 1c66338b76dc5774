//! A sample as every shard format yields it, before decoding
//! ([`RawSample`]): its image is a [`MemberProblem`] when missing, empty,
//! over the size limit, not an image or corrupt. [`ReadStep`] is a read
//! that asks its caller before it holds an image's bytes.

use bytes::Bytes;

use crate::image::ImageKind;

/// One sample's image and label, before decoding.
#[derive(Debug)]
pub struct RawSample {
    pub key: String,
    /// Position of the sample in its shard: the first is 0.
    pub position: u64,
    pub image: Result<(ImageKind, Bytes), MemberProblem>,
    pub label: Result<i64, String>,
    /// The other fields the reader was asked for, in the order asked:
    /// `Ok(None)` when the sample has no such member, feature or column.
    pub fields: Vec<RawField>,
}

/// One requested field as the shard holds it.
pub type RawField = Result<Option<RawValue>, MemberProblem>;

/// A field's value as stored, before it is read as the kind asked for.
#[derive(Clone, Debug, PartialEq)]
pub enum RawValue {
    /// A WebDataset member's bytes; a TFRecord bytes feature's single
    /// value; a Parquet binary cell.
    Bytes(Bytes),
    /// Text the store typed as such (a Parquet string cell).
    Str(Bytes),
    /// Several byte strings (a TFRecord bytes feature of more than one).
    BytesList(Vec<Bytes>),
    /// A scalar integer or number column (Parquet).
    Int(i64),
    Float(f64),
    /// Integer or number lists (TFRecord int64 and float features,
    /// Parquet list columns, RecordIO's label array).
    Ints(Vec<i64>),
    Floats(Vec<f64>),
}

/// Why a sample has no image to decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemberProblem {
    #[error("no image member (jpg, jpeg or png)")]
    Missing,
    #[error("{ext} member is empty")]
    Empty { ext: String },
    #[error("{ext} member of {size} bytes exceeds the member size limit of {limit} bytes")]
    TooLarge { ext: String, size: u64, limit: u64 },
    /// A record format's sample without its image feature or column.
    #[error("no {field} feature")]
    MissingField { field: String },
    /// Bytes that are neither a JPEG nor a PNG.
    #[error("{field} is not a JPEG or PNG image")]
    NotImage { field: String },
    /// A stored value of a type no field kind reads (a Parquet column
    /// of dates, say).
    #[error("{field} holds {what}, which no field kind reads")]
    Unreadable { field: String, what: String },
    /// A record whose checksum does not match its bytes.
    #[error("corrupt record at byte {offset}: {reason}")]
    Corrupt { offset: u64, reason: String },
}

/// How far a reader that asks before it reads got
/// (`SampleReader::next_sample_within`).
#[derive(Debug)]
pub enum ReadStep {
    /// The next sample, or `None` at the end of the shard.
    Sample(Option<RawSample>),
    /// The next thing to read into memory has `bytes` bytes, and the
    /// caller did not admit them: nothing was read; ask again.
    Blocked { bytes: u64 },
}
