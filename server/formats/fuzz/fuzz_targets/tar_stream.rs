//! Arbitrary bytes as a shard: the streaming tar reader and the WebDataset
//! grouping, read to the end or the first error.
//!
//! The first input byte picks the member size limit and how many bytes each
//! read hands out, so short reads and skipped oversized members are part of
//! what is explored; the rest is the stream.

#![no_main]

#[path = "common.rs"]
mod common;

use common::{Dribble, limits, now};
use libfuzzer_sys::fuzz_target;
use stoker_formats::wds::SampleReader;

fuzz_target!(|input: &[u8]| {
    let Some((&control, data)) = input.split_first() else {
        return;
    };
    let (max_member_bytes, step) = limits(control);
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
