//! Arbitrary bytes as a shard: the streaming tar reader and the WebDataset
//! grouping, read to the end or the first error.
//!
//! The first input byte picks the member size limit and how many bytes each
//! read hands out, so short reads and skipped oversized members are part of
//! what is explored; the rest is the stream. The reader asks before it
//! reads an image member, and every other ask is refused: a refused read
//! reads nothing of the member, and the next call asks for it again.

#![no_main]

#[path = "common.rs"]
mod common;

use common::{Dribble, limits, now};
use libfuzzer_sys::fuzz_target;
use stoker_formats::sample::ReadStep;
use stoker_formats::wds::SampleReader;

fuzz_target!(|input: &[u8]| {
    let Some((&control, data)) = input.split_first() else {
        return;
    };
    let (max_member_bytes, step) = limits(control);
    let mut reader = SampleReader::new(Dribble { data, step }, max_member_bytes);
    let mut samples = 0usize;
    let mut asks = 0u64;
    // The image size admitted for the sample being read.
    let mut admitted: Option<u64> = None;
    let mut blocked: Option<(u64, u64)> = None;
    loop {
        let next = now(reader.next_sample_within(&mut |bytes| {
            asks += 1;
            if let Some((size, _)) = blocked {
                assert_eq!(bytes, size, "asked for another member after a refusal");
            }
            let yes = asks.is_multiple_of(2);
            if yes {
                assert!(admitted.is_none(), "a second image asked for in one sample");
                admitted = Some(bytes);
            }
            yes
        }));
        match next {
            Ok(ReadStep::Blocked { bytes }) => {
                assert!(bytes > 0 && bytes <= max_member_bytes);
                if let Some((_, offset)) = blocked {
                    assert_eq!(reader.offset(), offset, "a refused member was read");
                }
                blocked = Some((bytes, reader.offset()));
                continue;
            }
            Ok(ReadStep::Sample(Some(sample))) => {
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
                    assert_eq!(
                        Some(bytes.len() as u64),
                        admitted,
                        "an image read without being admitted"
                    );
                }
            }
            Ok(ReadStep::Sample(None)) => {
                assert_eq!(reader.offset() % 512, 0, "archive ended off a block boundary");
                // The end is sticky.
                assert!(matches!(now(reader.next_sample()), Ok(None)));
                break;
            }
            Err(_) => break,
        }
        blocked = None;
        admitted = None;
        assert!(reader.offset() <= data.len() as u64);
    }
});
