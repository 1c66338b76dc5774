//! Gzipped shard bodies, decompressed as they stream.
//!
//! The decompressor's own failures (a corrupt or cut gzip stream) come out
//! as `InvalidData`, which the shard readers take for a property of the
//! shard; the body's failures (the network, S3) keep their meaning, so an
//! item on a broken connection is retried, not reported as corrupt.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_compression::tokio::bufread::GzipDecoder;
use tokio::io::{AsyncRead, BufReader, ReadBuf};

use super::ShardReader;

/// A body error, marked so that it is told apart from the decoder's.
#[derive(Debug)]
struct BodyError(io::Error);

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Marks the errors of the compressed body.
struct Marked(ShardReader);

impl AsyncRead for Marked {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.0.as_mut().poll_read(cx, buf) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(io::Error::new(e.kind(), BodyError(e)))),
            other => other,
        }
    }
}

/// The decompressed stream: body errors as they were, decoder errors as
/// `InvalidData`.
struct Gunzip(GzipDecoder<BufReader<Marked>>);

impl AsyncRead for Gunzip {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.0).poll_read(cx, buf) {
            Poll::Ready(Err(e)) => {
                let body = e.get_ref().is_some_and(|inner| inner.is::<BodyError>());
                Poll::Ready(Err(match body {
                    true => e,
                    false => io::Error::new(io::ErrorKind::InvalidData, format!("not a valid gzip stream: {e}")),
                }))
            }
            other => other,
        }
    }
}

/// `body`, a gzip stream (one member or several, as `cat` joins them),
/// decompressed.
pub fn gunzip(body: ShardReader) -> ShardReader {
    let mut decoder = GzipDecoder::new(BufReader::with_capacity(1 << 16, Marked(body)));
    decoder.multiple_members(true);
    Box::pin(Gunzip(decoder))
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_compression::tokio::write::GzipEncoder;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn gz(data: &[u8]) -> Vec<u8> {
        let mut enc = GzipEncoder::new(Vec::new());
        enc.write_all(data).await.unwrap();
        enc.shutdown().await.unwrap();
        enc.into_inner()
    }

    async fn read(body: Vec<u8>) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        gunzip(Box::pin(std::io::Cursor::new(body)))
            .read_to_end(&mut out)
            .await?;
        Ok(out)
    }

    #[tokio::test]
    async fn members_join_and_bad_streams_are_invalid_data() {
        let mut two = gz(b"hello ").await;
        two.extend(gz(b"world").await);
        assert_eq!(read(two).await.unwrap(), b"hello world");
        let mut cut = gz(&[7u8; 5000]).await;
        cut.truncate(cut.len() / 2);
        assert_eq!(read(cut).await.unwrap_err().kind(), io::ErrorKind::InvalidData);
        let err = read(b"not gzip at all".to_vec()).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    }

    #[tokio::test]
    async fn body_errors_keep_their_kind() {
        struct Broken;
        impl AsyncRead for Broken {
            fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, _: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionReset, "reset by peer")))
            }
        }
        let mut out = Vec::new();
        let err = gunzip(Box::pin(Broken)).read_to_end(&mut out).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
    }
}
