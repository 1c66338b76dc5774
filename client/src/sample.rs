//! What a worker sends back, in the client's own types: received samples
//! and skip reports. The gRPC edge (`wire`) makes them from the protobuf
//! messages, after checking them; nothing else sees those messages.

use bytes::Bytes;

/// A sample as received, checked against the expected shape.
#[derive(Debug)]
pub(crate) struct Sample {
    pub key: String,
    pub label: i64,
    /// The image's size: the transform's square, or, for a transform that
    /// keeps each image's size, its own.
    pub height: u32,
    pub width: u32,
    /// `height * width * 3` bytes, HWC RGB.
    pub pixels: Bytes,
    /// Position in its shard.
    pub position: u64,
    /// The plan item it belongs to (set by the lane that received it).
    pub item: u32,
    /// The request's other fields, in its order.
    pub fields: stoker_core::Fields,
    /// The request's views' pixels (HWC RGB, each its view's size), in
    /// its order.
    pub views: Vec<Bytes>,
    /// Set instead of `pixels`: the image a GPU lane of this process left
    /// on the loader's device (`stoker_cuda::handoff`).
    pub device: Option<stoker_cuda::handoff::DevicePixels>,
}

/// A sample the worker could not produce, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skipped {
    pub key: String,
    /// Position in its shard: with the shard, the sample's identity.
    pub position: u64,
    /// e.g. "jpeg decode failed: ...".
    pub reason: String,
}
