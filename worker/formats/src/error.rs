//! Why a streamed shard (WebDataset tar, TFRecord, RecordIO) could not be
//! read to its end: one error for the three readers ([`RecordError`]),
//! naming the format with the cause and the byte offset.

use std::fmt;

/// The streamed shard formats, as their errors name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordFormat {
    Tar,
    TfRecord,
    RecordIo,
}

impl fmt::Display for RecordFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tar => "tar",
            Self::TfRecord => "tfrecord",
            Self::RecordIo => "recordio",
        })
    }
}

/// Why a shard could not be read to its end, and where.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    /// The stream ended before `what` was complete.
    #[error("{format} truncated at byte {offset}: {what}")]
    Truncated {
        format: RecordFormat,
        offset: u64,
        what: &'static str,
    },
    /// The shard's bytes are not what they claim to be (a bad header or
    /// checksum, or a compressed shard that does not decompress).
    #[error("corrupt {format} at byte {offset}: {reason}")]
    Corrupt {
        format: RecordFormat,
        offset: u64,
        reason: String,
    },
    /// The transport failed.
    #[error("read failed at byte {offset}: {reason}")]
    Io {
        format: RecordFormat,
        offset: u64,
        reason: String,
    },
}

impl RecordError {
    /// Data errors are a property of the shard; I/O errors of the transport.
    pub fn is_io(&self) -> bool {
        matches!(self, Self::Io { .. })
    }

    /// The format of the shard that failed.
    pub fn format(&self) -> RecordFormat {
        match self {
            Self::Truncated { format, .. } | Self::Corrupt { format, .. } | Self::Io { format, .. } => *format,
        }
    }
}
