//! Arbitrary bytes as an image: sniffing, header dimensions and the JPEG
//! checks that run before any decoder, against a small pixel limit.

#![no_main]

use libfuzzer_sys::fuzz_target;
use stoker_formats::image::{ImageKind, check_jpeg, check_size, header_dimensions, sniff};

const MAX_PIXELS: u64 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let sniffed = sniff(data);
    for kind in [ImageKind::Jpeg, ImageKind::Png] {
        if let Ok((w, h)) = header_dimensions(kind, data)
            && check_size(u64::from(w), u64::from(h), MAX_PIXELS).is_ok()
        {
            assert!(w > 0 && h > 0 && u64::from(w) * u64::from(h) <= MAX_PIXELS);
        }
        if kind == ImageKind::Png && header_dimensions(kind, data).is_ok() {
            assert_eq!(sniffed, Some(ImageKind::Png));
        }
    }
    if let Ok((w, h)) = check_jpeg(data, MAX_PIXELS) {
        assert!(w > 0 && h > 0 && u64::from(w) * u64::from(h) <= MAX_PIXELS);
        assert_eq!(header_dimensions(ImageKind::Jpeg, data), Ok((w, h)));
        assert!(data.starts_with(&[0xff, 0xd8]));
    }
});
