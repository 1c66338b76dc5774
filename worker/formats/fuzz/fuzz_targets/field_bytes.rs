//! Arbitrary bytes as a field's stored value, read as every kind
//! (`stoker_core::FieldValue::from_bytes`, what a worker does with a
//! dataset's `txt`, `json`, `cls`, `npy`... member): never a panic, and
//! what parses holds no more than the input says.

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use stoker_core::{FieldKind, FieldValue};

fuzz_target!(|data: &[u8]| {
    for kind in FieldKind::ALL {
        let Ok(value) = FieldValue::from_bytes(kind, Bytes::copy_from_slice(data)) else {
            continue;
        };
        match value {
            FieldValue::Text(s) | FieldValue::Json(s) => assert_eq!(s.as_bytes(), data),
            // Each number takes at least one byte of text.
            FieldValue::IntList(v) => assert!(v.len() <= data.len()),
            FieldValue::FloatList(v) => assert!(v.len() <= data.len()),
            FieldValue::Array(a) => {
                // A mask is decoded with its image, never from bytes alone.
                assert_ne!(kind, FieldKind::Mask);
                assert!(a.data.len() <= data.len());
            }
            FieldValue::Bytes(b) => assert_eq!(&b[..], data),
            FieldValue::Int(_) | FieldValue::Float(_) => {}
            // Each box takes more than one byte of JSON.
            FieldValue::Targets(t) => assert!(t.boxes.len() <= data.len() && t.canvas == (0, 0)),
            FieldValue::Image(_) => panic!("{kind}: a view never comes from bytes alone"),
        }
    }
});
