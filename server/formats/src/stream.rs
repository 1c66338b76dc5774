//! What every shard reader does to its stream: read exact byte counts,
//! skip, and count the offset, so that each error can say where it was.

use tokio::io::{AsyncRead, AsyncReadExt};

/// Why bytes the reader needed did not come.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Shortfall {
    /// The stream ended before `what` was complete.
    Truncated { offset: u64, what: &'static str },
    /// The transport failed.
    Io { offset: u64, reason: String },
    /// The stream's bytes are not what they claim to be: a compressed
    /// shard that does not decompress (`InvalidData` from the reader).
    Corrupt { offset: u64, reason: String },
}

/// A stream read in exact amounts, counting the bytes consumed.
#[derive(Debug)]
pub(crate) struct Counted<R> {
    inner: R,
    offset: u64,
}

impl<R: AsyncRead + Unpin> Counted<R> {
    /// A stream that starts at byte `offset` of its shard (0 for a read
    /// from the beginning).
    pub(crate) fn at(inner: R, offset: u64) -> Self {
        Self { inner, offset }
    }

    /// Bytes consumed so far.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Fills `buf` completely. Returns false on a clean end of the stream
    /// before the first byte (only allowed where `eof_ok`).
    pub(crate) async fn fill(&mut self, buf: &mut [u8], what: &'static str, eof_ok: bool) -> Result<bool, Shortfall> {
        let mut got = 0;
        while got < buf.len() {
            let n = self.inner.read(&mut buf[got..]).await.map_err(|e| {
                let (offset, reason) = (self.offset + got as u64, e.to_string());
                match e.kind() {
                    std::io::ErrorKind::InvalidData => Shortfall::Corrupt { offset, reason },
                    _ => Shortfall::Io { offset, reason },
                }
            })?;
            if n == 0 {
                if got == 0 && eof_ok {
                    return Ok(false);
                }
                return Err(Shortfall::Truncated {
                    offset: self.offset + got as u64,
                    what,
                });
            }
            got += n;
        }
        self.offset += buf.len() as u64;
        Ok(true)
    }

    /// Reads past `n` bytes without keeping them.
    pub(crate) async fn skip(&mut self, mut n: u64, what: &'static str) -> Result<(), Shortfall> {
        let mut scratch = [0u8; 8192];
        while n > 0 {
            let take = n.min(scratch.len() as u64) as usize;
            self.fill(&mut scratch[..take], what, false).await?;
            n -= take as u64;
        }
        Ok(())
    }
}
