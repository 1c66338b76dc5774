//! Where a read of a shard starts, for every streamed format.

/// Where a read of a shard starts: the first sample's position and the
/// byte it starts at (both 0 for the whole shard, the default). A read
/// from elsewhere is one a record index located.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleStart {
    pub position: u64,
    pub offset: u64,
}
