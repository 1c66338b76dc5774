//! `ProcessShard`'s response framed without copying pixels, on both ends.
//!
//! tonic encodes a message into one buffer and decodes from one: a sample's
//! pixels are copied into the worker's encode buffer, and the client copies
//! the HTTP/2 frames it receives into its decode buffer before prost reads
//! them. Both copies touch every pixel byte on cores the pipeline and the
//! trainer need. Here:
//!
//! - [`encode_chunk`] writes a `SampleChunk` as the pieces of one gRPC
//!   message (the 5-byte prefix, then protobuf): small pieces for the
//!   message's other fields, and each sample's pixels as the `Bytes` they
//!   already are, chained (they reach the socket from the buffer the
//!   worker made them in);
//! - [`MessageReader`] gathers received frames as they are and decodes each
//!   message over them: prost takes a `bytes` field that lies within one
//!   frame as a slice of it ([`Rope`]'s `copy_to_bytes`), so pixels sent as
//!   one frame are never copied in user space.
//!
//! The bytes on the wire are plain gRPC: either end interoperates with any
//! other gRPC implementation.

use std::collections::VecDeque;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};

use crate::pb;

/// The gRPC message prefix: a compression flag and a big-endian length.
pub const PREFIX_BYTES: usize = 5;

/// Pixels shorter than this are copied into the surrounding piece: a
/// separate frame would cost more than the copy.
const CHAIN_MIN_BYTES: usize = 4096;

/// `Sample.pixels`' field number in `stoker.proto`.
const PIXELS_FIELD: u32 = 6;
/// `SampleChunk.samples`' field number.
const SAMPLES_FIELD: u32 = 1;

/// `chunk` as one gRPC message (uncompressed), in pieces to send in order:
/// each sample's pixels of [`CHAIN_MIN_BYTES`] or more are a piece of their
/// own, the very `Bytes` the chunk held.
pub fn encode_chunk(mut chunk: pb::SampleChunk) -> Vec<Bytes> {
    let samples = std::mem::take(&mut chunk.samples);
    // Each sample with its pixels taken out, and the pixels' field length.
    let mut parts = Vec::with_capacity(samples.len());
    let mut len = chunk.encoded_len();
    for mut sample in samples {
        let pixels = std::mem::take(&mut sample.pixels);
        let pixels_len = if pixels.is_empty() {
            0
        } else {
            key_len(PIXELS_FIELD) + encoded_len_varint(pixels.len() as u64) + pixels.len()
        };
        let sample_len = sample.encoded_len() + pixels_len;
        len += key_len(SAMPLES_FIELD) + encoded_len_varint(sample_len as u64) + sample_len;
        parts.push((sample, sample_len, pixels));
    }
    let mut pieces = Vec::with_capacity(2 * parts.len() + 1);
    let mut head = BytesMut::with_capacity(PREFIX_BYTES + 256);
    head.put_u8(0);
    head.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    for (sample, sample_len, pixels) in parts {
        encode_key(SAMPLES_FIELD, WireType::LengthDelimited, &mut head);
        encode_varint(sample_len as u64, &mut head);
        // The other fields first: protobuf readers accept fields in any
        // order, and the pixels then end the piece before them.
        sample.encode_raw(&mut head);
        if pixels.is_empty() {
            continue;
        }
        encode_key(PIXELS_FIELD, WireType::LengthDelimited, &mut head);
        encode_varint(pixels.len() as u64, &mut head);
        if pixels.len() < CHAIN_MIN_BYTES {
            head.put_slice(&pixels);
        } else {
            pieces.push(head.split().freeze());
            pieces.push(pixels);
        }
    }
    chunk.encode_raw(&mut head);
    if !head.is_empty() {
        pieces.push(head.freeze());
    }
    pieces
}

/// `message` as one gRPC message (uncompressed): the prefix, then its
/// protobuf encoding.
pub fn encode_message(message: &impl Message) -> Bytes {
    let len = message.encoded_len();
    let mut out = BytesMut::with_capacity(PREFIX_BYTES + len);
    out.put_u8(0);
    out.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    message.encode_raw(&mut out);
    out.freeze()
}

/// Why a received stream is not a well-formed sequence of messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The compression flag is set: this client asks for none.
    Compressed,
    /// A message over the limit the reader was given.
    TooLarge { len: usize, limit: usize },
    /// The stream ended inside a message.
    Truncated { missing: usize },
    /// The message is not valid protobuf for its type.
    Decode(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Compressed => write!(f, "the worker sent a compressed message, which was not asked for"),
            Self::TooLarge { len, limit } => {
                write!(f, "message of {len} bytes is over the limit of {limit} bytes")
            }
            Self::Truncated { missing } => write!(f, "stream ended {missing} bytes short of a whole message"),
            Self::Decode(e) => write!(f, "malformed message: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Gathers a response's data frames and decodes its messages over them.
#[derive(Debug)]
pub struct MessageReader {
    rope: Rope,
    limit: usize,
    /// The length of the message whose prefix has been read, if any.
    pending: Option<usize>,
    /// The first error: the stream is not read past it.
    failed: Option<FrameError>,
}

impl MessageReader {
    /// A reader that refuses messages over `limit` bytes (before holding
    /// them: the prefix announces the length).
    pub fn new(limit: usize) -> Self {
        Self {
            rope: Rope::default(),
            limit,
            pending: None,
            failed: None,
        }
    }

    /// Takes one received data frame, as it is.
    pub fn push(&mut self, data: Bytes) {
        self.rope.push(data);
    }

    /// The next whole message, if the frames so far hold one. After an
    /// error every call returns it again.
    pub fn next_message<M: Message + Default>(&mut self) -> Result<Option<M>, FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let next = self.read::<M>();
        if let Err(e) = &next {
            self.failed = Some(e.clone());
        }
        next
    }

    fn read<M: Message + Default>(&mut self) -> Result<Option<M>, FrameError> {
        if self.pending.is_none() {
            if self.rope.remaining() < PREFIX_BYTES {
                return Ok(None);
            }
            let flag = self.rope.get_u8();
            let len = self.rope.get_u32() as usize;
            if flag != 0 {
                return Err(FrameError::Compressed);
            }
            if len > self.limit {
                return Err(FrameError::TooLarge { len, limit: self.limit });
            }
            self.pending = Some(len);
        }
        let Some(len) = self.pending else { return Ok(None) };
        if self.rope.remaining() < len {
            return Ok(None);
        }
        self.pending = None;
        let message = self.rope.split_to(len);
        M::decode(message)
            .map(Some)
            .map_err(|e| FrameError::Decode(e.to_string()))
    }

    /// Checks that the stream ended between messages.
    pub fn finish(&self) -> Result<(), FrameError> {
        let missing = match self.pending {
            Some(len) => len - self.rope.remaining().min(len),
            None if self.rope.remaining() == 0 => return Ok(()),
            // Bytes left of a message whose prefix was not read yet.
            None => PREFIX_BYTES.saturating_sub(self.rope.remaining()),
        };
        Err(FrameError::Truncated { missing })
    }
}

/// Frames shorter than this are copied into the rope's tail instead of
/// kept apart: the rope then holds at most one entry per 2 KiB received,
/// whatever frames a worker sends.
const SMALL_FRAME_BYTES: usize = 2048;

/// Received bytes as the frames they came in (small frames gathered into
/// one tail buffer, so that tiny frames cannot make it grow without bound
/// in entries).
#[derive(Debug, Default)]
pub struct Rope {
    chunks: VecDeque<Bytes>,
    /// After `chunks`: small frames' bytes, copied.
    tail: BytesMut,
    len: usize,
}

impl Rope {
    fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        self.len += data.len();
        if data.len() < SMALL_FRAME_BYTES {
            self.tail.extend_from_slice(&data);
        } else {
            if !self.tail.is_empty() {
                self.chunks.push_back(self.tail.split().freeze());
            }
            self.chunks.push_back(data);
        }
    }

    /// The first `n` bytes (at most what it holds) as a rope of their own,
    /// sharing the frames.
    fn split_to(&mut self, n: usize) -> Rope {
        let mut front = Rope::default();
        while front.len < n {
            let want = n - front.len;
            let piece = match self.chunks.pop_front() {
                Some(mut chunk) => {
                    if chunk.len() > want {
                        self.chunks.push_front(chunk.split_off(want));
                    }
                    chunk
                }
                None if !self.tail.is_empty() => self.tail.split_to(want.min(self.tail.len())).freeze(),
                None => break,
            };
            self.len -= piece.len();
            front.len += piece.len();
            front.chunks.push_back(piece);
        }
        front
    }
}

impl Buf for Rope {
    fn remaining(&self) -> usize {
        self.len
    }

    fn chunk(&self) -> &[u8] {
        self.chunks.front().map_or(&self.tail[..], |c| &c[..])
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(cnt <= self.len, "advance past the end of a rope");
        self.len -= cnt;
        while cnt > 0 {
            let Some(front) = self.chunks.front_mut() else {
                self.tail.advance(cnt);
                return;
            };
            if front.len() > cnt {
                front.advance(cnt);
                return;
            }
            cnt -= front.len();
            self.chunks.pop_front();
        }
    }

    /// A slice of the front frame when it holds all `len` bytes (no copy);
    /// a copy only of bytes that straddle frames.
    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        assert!(len <= self.len, "copy_to_bytes past the end of a rope");
        match self.chunks.front_mut() {
            Some(front) if front.len() >= len => {
                let out = front.split_to(len);
                if front.is_empty() {
                    self.chunks.pop_front();
                }
                self.len -= len;
                out
            }
            None => {
                self.len -= len;
                self.tail.split_to(len).freeze()
            }
            _ => {
                let mut out = BytesMut::with_capacity(len);
                out.put(self.take(len));
                out.freeze()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(i: u8, pixels: usize) -> pb::Sample {
        pb::Sample {
            key: format!("k{i}"),
            label: i64::from(i) - 3,
            height: 7,
            width: 9,
            channels: 3,
            pixels: Bytes::from(vec![i; pixels]),
            position: u64::from(i) * 1000,
            fields: vec![pb::FieldValue {
                value: Some(pb::field_value::Value::Text(format!("caption {i}"))),
            }],
            ring_slot: None,
            device_ticket: None,
        }
    }

    fn chunk() -> pb::SampleChunk {
        pb::SampleChunk {
            samples: vec![sample(1, 150_528), sample(2, 0), sample(3, 100), sample(4, 70_000)],
            skipped: vec![pb::SkippedSample {
                key: "bad".into(),
                reason: "jpeg decode failed: no SOI".into(),
                position: 5,
            }],
            done: true,
            shard_error: "shard x.tar: truncated at byte 9".into(),
            read_samples: 0,
            read_bytes: 0,
            ring_refused: String::new(),
        }
    }

    /// The pieces, joined, are exactly what tonic's prost codec writes.
    #[test]
    fn pieces_are_the_standard_encoding() {
        let pieces = encode_chunk(chunk());
        let joined: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
        let mut standard = vec![0u8];
        let body = chunk().encode_to_vec();
        standard.extend_from_slice(&(body.len() as u32).to_be_bytes());
        assert_eq!(joined.len(), standard.len() + body.len());
        // Field order differs (pixels last within a sample), so compare
        // what a standard reader makes of it.
        assert_eq!(&joined[..PREFIX_BYTES], &standard[..]);
        assert_eq!(pb::SampleChunk::decode(&joined[PREFIX_BYTES..]).unwrap(), chunk());
    }

    /// Large pixels are the chunk's own `Bytes`, not copies.
    #[test]
    fn large_pixels_are_chained_not_copied() {
        let c = chunk();
        let original = c.samples[0].pixels.as_ptr();
        let pieces = encode_chunk(c);
        assert!(pieces.iter().any(|p| p.as_ptr() == original && p.len() == 150_528));
        assert_eq!(pieces.len(), 5, "head, pixels, head, pixels, tail");
    }

    /// Read back from frames cut anywhere, every message is whole and
    /// pixels that arrived in one frame are slices of it.
    #[test]
    fn reader_decodes_across_any_frame_cuts() {
        let pieces = encode_chunk(chunk());
        let wire: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
        let twice: Vec<u8> = [wire.clone(), wire].concat();
        for cut in [1, 3, 5, 6, 17, 4096, 100_000] {
            let mut reader = MessageReader::new(1 << 20);
            let mut got = Vec::new();
            for frame in twice.chunks(cut) {
                reader.push(Bytes::copy_from_slice(frame));
                while let Some(m) = reader.next_message::<pb::SampleChunk>().unwrap() {
                    got.push(m);
                }
            }
            reader.finish().unwrap();
            assert_eq!(got, vec![chunk(), chunk()], "frames of {cut} bytes");
        }
        let mut reader = MessageReader::new(1 << 20);
        for piece in &pieces {
            reader.push(piece.clone());
        }
        let m: pb::SampleChunk = reader.next_message().unwrap().unwrap();
        assert_eq!(
            m.samples[0].pixels.as_ptr(),
            pieces[1].as_ptr(),
            "pixels sliced, not copied"
        );
    }

    /// One-byte frames are gathered, not kept one entry each.
    #[test]
    fn tiny_frames_do_not_grow_the_rope_per_frame() {
        let wire: Vec<u8> = encode_chunk(chunk()).iter().flat_map(|p| p.to_vec()).collect();
        let mut reader = MessageReader::new(1 << 20);
        for b in &wire {
            reader.push(Bytes::copy_from_slice(&[*b]));
        }
        assert!(reader.rope.chunks.len() <= 1, "{} entries", reader.rope.chunks.len());
        assert_eq!(reader.next_message::<pb::SampleChunk>().unwrap(), Some(chunk()));
        reader.finish().unwrap();
    }

    #[test]
    fn reader_refuses_oversized_compressed_and_truncated_streams() {
        let wire: Vec<u8> = encode_chunk(chunk()).iter().flat_map(|p| p.to_vec()).collect();
        let mut reader = MessageReader::new(1000);
        reader.push(Bytes::from(wire.clone()));
        assert!(matches!(
            reader.next_message::<pb::SampleChunk>(),
            Err(FrameError::TooLarge { limit: 1000, .. })
        ));
        let mut compressed = wire.clone();
        compressed[0] = 1;
        let mut reader = MessageReader::new(1 << 20);
        reader.push(Bytes::from(compressed));
        assert_eq!(reader.next_message::<pb::SampleChunk>(), Err(FrameError::Compressed));
        assert_eq!(
            reader.next_message::<pb::SampleChunk>(),
            Err(FrameError::Compressed),
            "an error sticks"
        );
        let mut reader = MessageReader::new(1 << 20);
        reader.push(Bytes::copy_from_slice(&wire[..wire.len() - 10]));
        assert_eq!(reader.next_message::<pb::SampleChunk>(), Ok(None));
        assert_eq!(reader.finish(), Err(FrameError::Truncated { missing: 10 }));
        let mut reader = MessageReader::new(1 << 20);
        reader.push(Bytes::from_static(&[0, 0, 0, 0, 3, 0xff, 0xff, 0xff]));
        assert!(matches!(
            reader.next_message::<pb::SampleChunk>(),
            Err(FrameError::Decode(_))
        ));
    }
}
