//! What every shard reader does to its stream: read exact byte counts,
//! skip, and count the offset, so that each error can say where it was.

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::{RecordError, RecordFormat};

/// A stream read in exact amounts, counting the bytes consumed.
#[derive(Debug)]
pub(crate) struct Counted<R> {
    inner: R,
    offset: u64,
    /// What the stream holds, for its errors.
    format: RecordFormat,
}

impl<R: AsyncRead + Unpin> Counted<R> {
    /// A stream that starts at byte `offset` of its shard (0 for a read
    /// from the beginning), holding `format`.
    pub(crate) fn at(inner: R, offset: u64, format: RecordFormat) -> Self {
        Self { inner, offset, format }
    }

    /// Bytes consumed so far.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Fills `buf` completely. Returns false on a clean end of the stream
    /// before the first byte (only allowed where `eof_ok`).
    pub(crate) async fn fill(&mut self, buf: &mut [u8], what: &'static str, eof_ok: bool) -> Result<bool, RecordError> {
        let mut got = 0;
        while got < buf.len() {
            let n = self.inner.read(&mut buf[got..]).await.map_err(|e| {
                let (format, offset, reason) = (self.format, self.offset + got as u64, e.to_string());
                match e.kind() {
                    std::io::ErrorKind::InvalidData => RecordError::Corrupt { format, offset, reason },
                    _ => RecordError::Io { format, offset, reason },
                }
            })?;
            if n == 0 {
                if got == 0 && eof_ok {
                    return Ok(false);
                }
                return Err(RecordError::Truncated {
                    format: self.format,
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
    pub(crate) async fn skip(&mut self, mut n: u64, what: &'static str) -> Result<(), RecordError> {
        let mut scratch = [0u8; 8192];
        while n > 0 {
            let take = n.min(scratch.len() as u64) as usize;
            self.fill(&mut scratch[..take], what, false).await?;
            n -= take as u64;
        }
        Ok(())
    }
}
