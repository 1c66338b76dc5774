//! Arbitrary bytes as a RecordIO shard (the part framing, multi-part
//! records, `IRHeader` and its labels), read to the end or the first error;
//! and the same bytes as both kinds of record index file.
//!
//! The first input byte picks the record size limit and how many bytes each
//! read hands out; the rest is the stream.

#![no_main]

#[path = "common.rs"]
mod common;

use common::{Dribble, limits, now};
use libfuzzer_sys::fuzz_target;
use stoker_formats::index::{byte_range, recordio_offsets, tfrecord_offsets};
use stoker_formats::recordio::RecordIoReader;
use stoker_formats::start::SampleStart;

fuzz_target!(|input: &[u8]| {
    let Some((&control, data)) = input.split_first() else {
        return;
    };
    for offsets in [recordio_offsets(data), tfrecord_offsets(data)].into_iter().flatten() {
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "offsets sorted and distinct");
        let n = offsets.len() as u64;
        for start in [0, n / 2, n] {
            if let Ok((first, last)) = byte_range(&offsets, start, Some(start + 1)) {
                assert!(start < n);
                assert!(last.is_none_or(|last| first < last));
            }
        }
    }
    let (max_record_bytes, step) = limits(control);
    let mut reader = RecordIoReader::new(
        Dribble { data, step },
        "shard.rec",
        SampleStart::default(),
        max_record_bytes,
        -1,
    );
    let mut samples = 0u64;
    loop {
        match now(reader.next_sample()) {
            Ok(Some(sample)) => {
                // Every record takes at least its 8 bytes of framing.
                samples += 1;
                assert!(
                    samples * 8 <= data.len() as u64,
                    "{samples} records from {} bytes",
                    data.len()
                );
                assert_eq!(sample.position, samples - 1);
                if let Ok((_, bytes)) = &sample.image {
                    assert!(!bytes.is_empty() && bytes.len() as u64 <= max_record_bytes);
                }
            }
            Ok(None) => {
                assert_eq!(reader.offset(), data.len() as u64, "the shard ended before its bytes");
                break;
            }
            Err(_) => break,
        }
        assert!(reader.offset() <= data.len() as u64);
    }
});
