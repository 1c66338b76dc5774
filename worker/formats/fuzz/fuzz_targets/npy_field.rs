//! Arbitrary bytes as a `.npy` field value (`stoker_core::NpyArray`, what
//! a worker reads from a dataset's `npy` member): never a panic, and an
//! array that parses holds exactly the bytes its dtype and shape say.

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use stoker_core::NpyArray;

fuzz_target!(|data: &[u8]| {
    let Ok(a) = NpyArray::parse(Bytes::copy_from_slice(data)) else {
        return;
    };
    let itemsize: u64 = a.dtype[2..].parse().expect("a parsed dtype has a size");
    let elements = a.shape.iter().product::<u64>();
    assert_eq!(a.data.len() as u64, elements * itemsize, "{a:?}");
    assert!(a.data.len() <= data.len());
});
