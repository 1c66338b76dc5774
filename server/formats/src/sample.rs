//! A sample as every shard format yields it, before decoding.

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
    /// A record whose checksum does not match its bytes.
    #[error("corrupt record at byte {offset}: {reason}")]
    Corrupt { offset: u64, reason: String },
}

/// How far a reader that asks before it reads got
/// (`SampleReader::next_sample_within`).
#[derive(Debug)]
pub enum Step {
    /// The next sample, or `None` at the end of the shard.
    Sample(Option<RawSample>),
    /// The next thing to read into memory has `bytes` bytes, and the
    /// caller did not admit them: nothing was read; ask again.
    Blocked { bytes: u64 },
}
