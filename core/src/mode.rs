//! What a worker does with a work item's samples. Training always
//! processes; `stoker doctor` measures one stage of the pipeline at a time
//! with the others.

/// What a worker does with an item's samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ItemMode {
    /// Read, decode, transform and send them.
    #[default]
    Process,
    /// Read and parse the shard only, and report counts: storage alone.
    Read,
    /// Read, decode and transform, and report counts instead of pixels:
    /// storage and decode, without the transport.
    Decode,
    /// Send `end - start` samples of the output size with zero pixels,
    /// reading and decoding nothing: the transport alone.
    Synthetic,
}

impl ItemMode {
    /// The name used in reports and errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Process => "process",
            Self::Read => "read",
            Self::Decode => "decode",
            Self::Synthetic => "synthetic",
        }
    }
}
