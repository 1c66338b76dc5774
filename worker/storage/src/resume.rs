//! Resumable shard bodies: a [`ResumingReader`] turns a body that breaks
//! off or stalls into ranged re-reads from the first byte not delivered,
//! with exponential backoff and full jitter, a bounded number of times;
//! on S3 each re-read is a ranged GET with `If-Match` the first ETag.
//! What it reads again from is a [`Reopen`]: the S3 object, or a test
//! double.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use stoker_core::error_chain;
use tokio::io::{AsyncRead, ReadBuf};
use tracing::warn;

use super::{ShardReader, StorageConfig, StorageStats};

/// Retry timing of a resumable read, taken from a [`StorageConfig`].
#[derive(Clone, Copy, Debug)]
pub(super) struct ResumePolicy {
    read_timeout: Duration,
    max_resumes: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
}

impl From<&StorageConfig> for ResumePolicy {
    fn from(c: &StorageConfig) -> Self {
        Self {
            read_timeout: c.read_timeout,
            max_resumes: c.max_resumes,
            initial_backoff: c.initial_backoff,
            max_backoff: c.max_backoff,
        }
    }
}

impl ResumePolicy {
    /// Full jitter: uniform in `[0, min(max_backoff, initial * 2^(attempt-1))]`.
    fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self
            .initial_backoff
            .saturating_mul(1 << attempt.saturating_sub(1).min(20))
            .min(self.max_backoff);
        ceiling.mul_f64(stoker_core::jitter::unit())
    }
}

/// Why a ranged re-read could not start. The message does not name the
/// object; the reader adds it.
#[derive(Debug)]
pub(super) struct ReopenError {
    pub(super) message: String,
    /// Another try would fail the same way (404, 403, changed object...).
    pub(super) permanent: bool,
}

pub(super) type ReopenFuture = Pin<Box<dyn Future<Output = Result<ShardReader, ReopenError>> + Send>>;

/// An object that can be read again from a byte offset on: the S3 object
/// behind a shard, or a test double.
pub(super) trait Reopen: Send + Sync + 'static {
    /// The object's bytes from `offset` to its end.
    fn reopen(&self, offset: u64) -> ReopenFuture;
}

/// Where a [`ResumingReader`] is.
enum ReadState {
    /// Reading a body; `stall` runs while the body has nothing to give.
    Reading {
        body: ShardReader,
        stall: Option<Pin<Box<tokio::time::Sleep>>>,
    },
    /// Backing off before the next ranged read.
    Waiting(Pin<Box<tokio::time::Sleep>>),
    /// A ranged read from the current offset is on its way.
    Opening(ReopenFuture),
    Failed(String),
    Done,
}

/// A shard body that survives cut and stalled connections: when the body
/// fails, ends before the object's size, or yields nothing for
/// `read_timeout` while it is read, the reader backs off (exponential, full
/// jitter) and reads on from the first byte it has not delivered, at most
/// `max_resumes` times. Past that, or on a permanent error, reads fail with
/// an error naming the object and the offset.
///
/// The offset only counts bytes handed to the caller, so a resumed body
/// continues exactly where the caller is.
pub(super) struct ResumingReader {
    object: String,
    source: Arc<dyn Reopen>,
    policy: ResumePolicy,
    /// One past the last byte to deliver (the object's size for a whole
    /// read), when the first response said.
    size: Option<u64>,
    /// The next byte to deliver, counted from the object's beginning.
    offset: u64,
    resumes: u32,
    /// The storage's totals: each resume counts there too.
    stats: Arc<StorageStats>,
    state: ReadState,
}

impl ResumingReader {
    /// A reader of `body`, which holds the object's bytes from `start` up
    /// to `end` (exclusive; `None` when the response did not say).
    pub(super) fn new(
        object: String,
        body: ShardReader,
        (start, end): (u64, Option<u64>),
        source: Arc<dyn Reopen>,
        policy: ResumePolicy,
        stats: Arc<StorageStats>,
    ) -> Self {
        Self {
            object,
            source,
            policy,
            stats,
            size: end,
            offset: start,
            resumes: 0,
            state: ReadState::Reading { body, stall: None },
        }
    }

    /// The body broke off because of `cause`: schedule a resume, or fail.
    fn interrupted(&mut self, cause: String) {
        let (object, offset) = (&self.object, self.offset);
        if self.size.is_some_and(|size| offset >= size) {
            // Everything arrived but the body still failed (a checksum
            // trailer, say): there is nothing to read again.
            self.state = ReadState::Failed(format!("{object}: read failed at byte {offset} (the end): {cause}"));
            return;
        }
        if self.resumes >= self.policy.max_resumes {
            self.state = ReadState::Failed(format!(
                "{object}: read failed at byte {offset} after {} resumes: {cause}",
                self.resumes
            ));
            return;
        }
        self.resumes += 1;
        self.stats.resumes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let delay = self.policy.backoff(self.resumes);
        warn!(
            object = %object,
            offset,
            attempt = self.resumes,
            max_resumes = self.policy.max_resumes,
            delay_ms = delay.as_millis() as u64,
            cause = %cause,
            "shard read interrupted, resuming with a ranged get"
        );
        self.state = ReadState::Waiting(Box::pin(tokio::time::sleep(delay)));
    }
}

impl AsyncRead for ResumingReader {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                ReadState::Reading { body, stall } => {
                    let before = buf.filled().len();
                    match body.as_mut().poll_read(cx, buf) {
                        Poll::Ready(Ok(())) => {
                            let n = buf.filled().len() - before;
                            if n > 0 || buf.remaining() == 0 {
                                this.offset += n as u64;
                                *stall = None;
                                return Poll::Ready(Ok(()));
                            }
                            match this.size {
                                Some(size) if this.offset < size => {
                                    let cause = format!("body ended at byte {} of {size}", this.offset);
                                    this.interrupted(cause);
                                }
                                _ => this.state = ReadState::Done,
                            }
                        }
                        Poll::Ready(Err(e)) => this.interrupted(error_chain(&e)),
                        Poll::Pending => {
                            let timeout = this.policy.read_timeout;
                            let timer = stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                            ready!(timer.as_mut().poll(cx));
                            this.interrupted(format!("no data for {:.1}s", timeout.as_secs_f64()));
                        }
                    }
                }
                ReadState::Waiting(sleep) => {
                    ready!(sleep.as_mut().poll(cx));
                    this.state = ReadState::Opening(this.source.reopen(this.offset));
                }
                ReadState::Opening(fut) => match ready!(fut.as_mut().poll(cx)) {
                    Ok(body) => this.state = ReadState::Reading { body, stall: None },
                    Err(e) if e.permanent => {
                        this.state = ReadState::Failed(format!(
                            "{}: read failed at byte {}: {}",
                            this.object, this.offset, e.message
                        ));
                    }
                    Err(e) => this.interrupted(e.message),
                },
                ReadState::Failed(message) => return Poll::Ready(Err(io::Error::other(message.clone()))),
                ReadState::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How one scripted body of [`Scripted`] ends after its bytes.
    #[derive(Clone, Copy, Debug)]
    enum End {
        /// The object's real end.
        Finish,
        /// An I/O error (connection reset).
        Error,
        /// Nothing more, ever (a paused server).
        Stall,
        /// A clean end of stream before the object's end.
        Short,
    }

    /// A body over `data[from..until]`, handed out in odd-sized pieces.
    struct Body {
        data: Arc<Vec<u8>>,
        pos: usize,
        until: usize,
        end: End,
    }

    impl AsyncRead for Body {
        fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            if self.pos < self.until {
                let n = (self.until - self.pos).min(997).min(buf.remaining());
                let pos = self.pos;
                buf.put_slice(&self.data[pos..pos + n]);
                self.pos += n;
                return Poll::Ready(Ok(()));
            }
            match self.end {
                End::Finish | End::Short => Poll::Ready(Ok(())),
                End::Error => Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionReset, "connection reset"))),
                // Never woken: only the reader's stall timer gets it going.
                End::Stall => Poll::Pending,
            }
        }
    }

    /// A test double for S3: each reopen serves the next scripted body
    /// (bytes to give, then how it ends) or error, and records its offset.
    struct Scripted {
        data: Arc<Vec<u8>>,
        script: std::sync::Mutex<std::collections::VecDeque<Result<(usize, End), ReopenError>>>,
        offsets: std::sync::Mutex<Vec<u64>>,
    }

    impl Scripted {
        fn body(&self, from: usize, step: (usize, End)) -> ShardReader {
            let (len, end) = step;
            let until = from.saturating_add(len).min(self.data.len());
            Box::pin(Body {
                data: Arc::clone(&self.data),
                pos: from,
                until,
                end,
            })
        }
    }

    impl Reopen for Scripted {
        fn reopen(&self, offset: u64) -> ReopenFuture {
            self.offsets.lock().unwrap().push(offset);
            let next = self
                .script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Ok((usize::MAX, End::Finish)));
            let result = next.map(|step| self.body(offset as usize, step));
            Box::pin(async move { result })
        }
    }

    fn policy(max_resumes: u32) -> ResumePolicy {
        ResumePolicy {
            read_timeout: Duration::from_millis(50),
            max_resumes,
            initial_backoff: Duration::from_millis(2),
            max_backoff: Duration::from_millis(10),
        }
    }

    /// A reader whose first body is `first`, then the `script`ed reopens.
    fn scripted(
        size: usize,
        first: (usize, End),
        script: Vec<Result<(usize, End), ReopenError>>,
        max_resumes: u32,
    ) -> (ResumingReader, Arc<Scripted>, Arc<Vec<u8>>) {
        // Bytes whose value depends on their position, so a repeated or
        // skipped range cannot compare equal.
        let data: Arc<Vec<u8>> = Arc::new((0..size).map(|i| (i * 7 + i / 251) as u8).collect());
        let source = Arc::new(Scripted {
            data: Arc::clone(&data),
            script: std::sync::Mutex::new(script.into()),
            offsets: std::sync::Mutex::new(Vec::new()),
        });
        let body = source.body(0, first);
        let reader = ResumingReader::new(
            "s3://b/k.tar".into(),
            body,
            (0, Some(size as u64)),
            Arc::clone(&source) as Arc<dyn Reopen>,
            policy(max_resumes),
            Arc::default(),
        );
        (reader, source, data)
    }

    async fn read_all(mut reader: ResumingReader) -> io::Result<Vec<u8>> {
        use tokio::io::AsyncReadExt;
        let mut out = Vec::new();
        // Small, odd reads so resumes land inside the caller's buffer.
        let mut buf = [0u8; 1500];
        loop {
            let n = reader.read(&mut buf).await?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    #[tokio::test]
    async fn resumes_splice_bytes_without_gaps_or_repeats() {
        let script = vec![
            Ok((10_000, End::Stall)),
            Err(ReopenError {
                message: "503 slow down".into(),
                permanent: false,
            }),
            Ok((1, End::Short)),
            Ok((25_000, End::Error)),
        ];
        let (reader, source, data) = scripted(100_003, (12_345, End::Error), script, 10);
        let got = read_all(reader).await.unwrap();
        assert_eq!(got.len(), data.len());
        assert!(got == *data, "bytes differ after resumes");
        // Each resume starts where the previous body stopped; the failed
        // reopen is retried at the same offset.
        let offsets = source.offsets.lock().unwrap().clone();
        assert_eq!(offsets, [12_345, 22_345, 22_345, 22_346, 47_346]);
    }

    #[tokio::test]
    async fn a_body_ending_early_is_resumed_and_the_real_end_is_not() {
        let (reader, source, data) = scripted(5_000, (4_999, End::Short), vec![], 3);
        assert!(read_all(reader).await.unwrap() == *data);
        assert_eq!(*source.offsets.lock().unwrap(), [4_999]);

        let (reader, source, data) = scripted(5_000, (5_000, End::Finish), vec![], 3);
        assert!(read_all(reader).await.unwrap() == *data);
        assert!(source.offsets.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn gives_up_after_max_resumes_naming_object_offset_and_cause() {
        let script = vec![Ok((100, End::Error)), Ok((100, End::Error)), Ok((100, End::Error))];
        let (reader, source, _) = scripted(10_000, (1_000, End::Error), script, 2);
        let err = read_all(reader).await.unwrap_err().to_string();
        assert_eq!(
            err,
            "s3://b/k.tar: read failed at byte 1200 after 2 resumes: connection reset"
        );
        assert_eq!(*source.offsets.lock().unwrap(), [1_000, 1_100]);
    }

    #[tokio::test]
    async fn a_permanent_reopen_error_fails_at_once() {
        let script = vec![Err(ReopenError {
            message: "changed while being read (no longer etag \"abc\")".into(),
            permanent: true,
        })];
        let (reader, source, _) = scripted(10_000, (777, End::Error), script, 10);
        let err = read_all(reader).await.unwrap_err().to_string();
        assert!(
            err.starts_with("s3://b/k.tar: read failed at byte 777: changed while being read"),
            "{err}"
        );
        assert_eq!(
            source.offsets.lock().unwrap().len(),
            1,
            "no retry after a permanent error"
        );
    }

    #[test]
    fn backoff_is_jittered_below_a_doubling_ceiling() {
        let p = ResumePolicy {
            read_timeout: Duration::from_secs(1),
            max_resumes: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
        };
        for attempt in 1..40 {
            let ceiling = Duration::from_millis((100u64 << (attempt - 1).min(10)).min(350));
            assert!(p.backoff(attempt) <= ceiling, "attempt {attempt}");
        }
        let draws: std::collections::HashSet<_> = (0..20).map(|_| p.backoff(3)).collect();
        assert!(draws.len() > 1, "backoff is not jittered");
    }
}
