//! What processing a sample comes to, wherever it ran (the CPU pool or
//! a GPU lane): a [`Processed`] sample or a [`Skipped`] one with its
//! [`SkipKind`]. Below both `pipeline` and `gpu`, so that neither imports
//! the other for them.

use bytes::Bytes;
use stoker_core::Fields;

/// One processed sample: uint8 HWC RGB pixels (a GPU batch's samples share
/// one allocation).
#[derive(Clone, Debug)]
pub struct Processed {
    pub key: String,
    /// Position in its shard (see `RawSample::position`).
    pub position: u64,
    pub label: i64,
    pub width: u32,
    pub height: u32,
    pub pixels: Bytes,
    /// The request's other fields, in its order (empty when it asked for
    /// none). The item attaches them; the lanes never see them.
    pub fields: Fields,
    /// Set instead of `pixels` when a GPU lane left the image on the
    /// device for a loader in this process (`Item::on_device`).
    pub device: Option<stoker_cuda::handoff::DevicePixels>,
}

/// A sample the worker could not use, and why.
#[derive(Debug)]
pub struct Skipped {
    pub key: String,
    /// Position in its shard: with the shard, the sample's identity.
    pub position: u64,
    pub reason: String,
    pub kind: SkipKind,
}

impl Skipped {
    /// The sample `key` at `position`, whose `stage` panicked with
    /// `message` (caught): an [`SkipKind::Internal`] skip whose reason
    /// names both.
    pub fn panicked(key: &str, position: u64, stage: &str, message: &str) -> Self {
        Self {
            key: key.to_owned(),
            position,
            reason: format!("internal error: {stage} of {key} panicked: {message}"),
            kind: SkipKind::Internal,
        }
    }
}

/// What kind of problem made a sample unusable: the few values of the
/// `reason` label of `stoker_worker_skipped_total` (the full reason, with
/// the key, goes to the client and the log).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SkipKind {
    /// No image member, or an empty one.
    NotImage,
    /// A member over the size limit, or an image over the pixel limit.
    TooLarge,
    /// Image bytes that do not decode (corrupt, truncated, not what their
    /// extension says).
    Decode,
    /// A label member that is not an integer.
    Label,
    /// A transform that failed or produced the wrong size.
    Transform,
    /// A sample that needs more memory than the worker's whole budget.
    Memory,
    /// A record whose checksum does not match, or that does not parse
    /// (TFRecord).
    Corrupt,
    /// A requested field the sample lacks (and the request did not make
    /// optional).
    MissingField,
    /// A field whose value is not its kind: text that is not UTF-8, JSON
    /// that does not parse, a number that is not one.
    BadField,
    /// A panic in the worker's own code (a decoder's or a transform's, on
    /// the CPU pool or a GPU lane's host work), caught: the reason says
    /// where, with the panic's message. A bug to report, not bad data.
    Internal,
}

impl SkipKind {
    pub const ALL: [SkipKind; 10] = [
        SkipKind::NotImage,
        SkipKind::TooLarge,
        SkipKind::Decode,
        SkipKind::Label,
        SkipKind::Transform,
        SkipKind::Memory,
        SkipKind::Corrupt,
        SkipKind::MissingField,
        SkipKind::BadField,
        SkipKind::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SkipKind::NotImage => "not_image",
            SkipKind::TooLarge => "too_large",
            SkipKind::Decode => "decode",
            SkipKind::Label => "label",
            SkipKind::Transform => "transform",
            SkipKind::Memory => "memory",
            SkipKind::Corrupt => "corrupt",
            SkipKind::MissingField => "missing_field",
            SkipKind::BadField => "bad_field",
            SkipKind::Internal => "internal",
        }
    }
}

impl From<&stoker_formats::sample::MemberProblem> for SkipKind {
    fn from(problem: &stoker_formats::sample::MemberProblem) -> Self {
        match problem {
            stoker_formats::sample::MemberProblem::Missing
            | stoker_formats::sample::MemberProblem::Empty { .. }
            | stoker_formats::sample::MemberProblem::MissingField { .. }
            | stoker_formats::sample::MemberProblem::NotImage { .. } => SkipKind::NotImage,
            stoker_formats::sample::MemberProblem::TooLarge { .. } => SkipKind::TooLarge,
            stoker_formats::sample::MemberProblem::Corrupt { .. } => SkipKind::Corrupt,
            stoker_formats::sample::MemberProblem::Unreadable { .. } => SkipKind::BadField,
        }
    }
}

impl From<&stoker_image::decode::DecodeError> for SkipKind {
    fn from(err: &stoker_image::decode::DecodeError) -> Self {
        match err {
            stoker_image::decode::DecodeError::TooLarge { .. } => SkipKind::TooLarge,
            stoker_image::decode::DecodeError::Invalid { .. } => SkipKind::Decode,
        }
    }
}

impl From<&stoker_image::ImageError> for SkipKind {
    fn from(err: &stoker_image::ImageError) -> Self {
        match err {
            stoker_image::ImageError::Decode(e) => SkipKind::from(e),
            stoker_image::ImageError::TooLarge(_) => SkipKind::TooLarge,
            stoker_image::ImageError::Resolve(_) | stoker_image::ImageError::Augment(_) => SkipKind::Transform,
        }
    }
}
