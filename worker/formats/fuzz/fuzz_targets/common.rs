//! What the stream targets share: an in-memory stream that hands out a few
//! bytes per read, and a way to run a future over it without a runtime.

use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, ReadBuf};

/// An in-memory stream that hands out at most `step` bytes per read.
pub struct Dribble<'a> {
    pub data: &'a [u8],
    pub step: usize,
}

impl AsyncRead for Dribble<'_> {
    fn poll_read(mut self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let n = self.step.min(self.data.len()).min(buf.remaining());
        let (head, tail) = self.data.split_at(n);
        buf.put_slice(head);
        self.data = tail;
        Poll::Ready(Ok(()))
    }
}

/// Runs a future whose I/O is all in memory: it must finish in one poll.
pub fn now<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("reader over memory returned Pending"),
    }
}

/// The first input byte's choice of a size limit and of the bytes each
/// read hands out, so short reads and oversized members or records are
/// part of what is explored.
pub fn limits(control: u8) -> (u64, usize) {
    let max_bytes = [0, 1, 700, 1 << 20][usize::from(control >> 6)];
    let step = [1, 7, 512, 4096][usize::from(control >> 4 & 3)] + usize::from(control & 15);
    (max_bytes, step)
}
