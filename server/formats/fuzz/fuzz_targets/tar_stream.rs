//! Arbitrary bytes as a shard: the streaming tar reader and the WebDataset
//! grouping, read to the end or the first error.
//!
//! The first input byte picks the member size limit and how many bytes each
//! read hands out, so short reads and skipped oversized members are part of
//! what is explored; the rest is the stream.

#![no_main]

use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use libfuzzer_sys::fuzz_target;
use stoker_formats::wds::SampleReader;
use tokio::io::{AsyncRead, ReadBuf};

/// An in-memory stream that hands out at most `step` bytes per read.
struct Dribble<'a> {
    data: &'a [u8],
    step: usize,
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
fn now<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("reader over memory returned Pending"),
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&control, data)) = input.split_first() else {
        return;
    };
    let max_member_bytes = [0, 1, 700, 1 << 20][usize::from(control >> 6)];
    let step = [1, 7, 512, 4096][usize::from(control >> 4 & 3)] + usize::from(control & 15);
    let mut reader = SampleReader::new(Dribble { data, step }, max_member_bytes);
    let mut samples = 0usize;
    loop {
        match now(reader.next_sample()) {
            Ok(Some(sample)) => {
                samples += 1;
                // Every sample needs at least one header block of its own.
                assert!(
                    samples <= data.len() / 512,
                    "{samples} samples from {} bytes",
                    data.len()
                );
                assert!(!sample.key.is_empty());
                if let Ok((_, bytes)) = &sample.image {
                    assert!(!bytes.is_empty() && bytes.len() as u64 <= max_member_bytes);
                }
            }
            Ok(None) => {
                assert_eq!(reader.offset() % 512, 0, "archive ended off a block boundary");
                // The end is sticky.
                assert!(matches!(now(reader.next_sample()), Ok(None)));
                break;
            }
            Err(_) => break,
        }
        assert!(reader.offset() <= data.len() as u64);
    }
});
