//! Arbitrary bytes as a TFRecord shard: the record framing, both
//! checksums and the tf.train.Example decoding, read to the end or the
//! first error.
//!
//! The first input byte picks the record size limit and how many bytes each
//! read hands out; the rest is the stream.

#![no_main]

#[path = "common.rs"]
mod common;

use common::{Dribble, limits, now};
use libfuzzer_sys::fuzz_target;
use stoker_formats::start::SampleStart;
use stoker_formats::tfrecord::{ExampleFields, ExampleReader};

fuzz_target!(|input: &[u8]| {
    let Some((&control, data)) = input.split_first() else {
        return;
    };
    let (max_record_bytes, step) = limits(control);
    let fields = ExampleFields {
        image: "image/encoded".to_owned(),
        label: "image/class/label".to_owned(),
        label_offset: -1,
        key: "image/filename".to_owned(),
        // Fields of every list kind (feature_value).
        extra: vec![
            "caption".to_owned(),
            "image/class/label".to_owned(),
            "image/encoded".to_owned(),
        ],
    };
    let mut reader = ExampleReader::new(
        Dribble { data, step },
        "shard",
        fields,
        max_record_bytes,
        SampleStart::default(),
    );
    let mut samples = 0u64;
    loop {
        match now(reader.next_sample()) {
            Ok(Some(sample)) => {
                // Every record takes at least its 16 bytes of framing.
                samples += 1;
                assert!(
                    samples * 16 <= data.len() as u64,
                    "{samples} records from {} bytes",
                    data.len()
                );
                assert_eq!(sample.position, samples - 1);
                assert!(!sample.key.is_empty());
                // Every field asked for, or none for a record that is not an Example.
                assert!(matches!(sample.fields.len(), 0 | 3), "{} fields", sample.fields.len());
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
