//! Region-of-interest JPEG decoding through libjpeg-turbo (linked
//! statically when the build finds it; see `build.rs`).
//!
//! Layers, as in cudarc: [`sys`] declares the one C function of
//! `csrc/jpeg_region.c`; [`decode_region`] checks every argument, owns the
//! buffers and turns the return code into a `Result`. Callers never touch
//! raw pointers.
//!
//! The pipeline uses it when a sample's first step crops a box: only the
//! box is decoded. Without it, or when it refuses an image (CMYK...),
//! zune-jpeg decodes the whole image. The C file is the project's only C
//! and takes plain arguments, so Rust never sees libjpeg's structs.

use stoker_image::decode::RgbImage;

/// True when this build carries the libjpeg-turbo region decoder.
pub const AVAILABLE: bool = cfg!(stoker_libjpeg);

/// Whether the worker uses the region decoder: when the build has it and
/// `STOKER_JPEG_DECODER` is not `zune` (the switch lets benchmarks compare
/// both decoders with one binary).
pub fn enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| AVAILABLE && std::env::var("STOKER_JPEG_DECODER").map_or(true, |v| v != "zune"))
}

// libjpeg-turbo built from source: its static library is linked only
// when the crate is used.
#[cfg(feature = "vendored")]
use turbojpeg_sys as _;

#[cfg(stoker_libjpeg)]
mod sys {
    use std::ffi::c_char;

    unsafe extern "C" {
        /// Decodes the box (x, y, w, h) of a JPEG as RGB into `out`.
        ///
        /// # Safety
        /// `data` must point to `len` readable bytes, `out` to `w * h * 3`
        /// writable bytes and `msg` to `msg_len` writable bytes, all valid
        /// for the duration of the call.
        pub(crate) fn stoker_jpeg_decode_region(
            data: *const u8,
            len: std::ffi::c_ulong,
            x: u32,
            y: u32,
            w: u32,
            h: u32,
            out: *mut u8,
            msg: *mut c_char,
            msg_len: usize,
        ) -> i32;
    }
}

/// Decodes only the box (`x`, `y`, `w`, `h`) of `data`, which must lie
/// inside the image. Rows below the box are never decoded; rows above it
/// and columns beside it skip the inverse DCT and colour conversion.
#[cfg(stoker_libjpeg)]
pub fn decode_region(data: &[u8], x: u32, y: u32, w: u32, h: u32) -> Result<RgbImage, String> {
    if w == 0 || h == 0 {
        return Err(format!("empty region {w}x{h}"));
    }
    let len = std::ffi::c_ulong::try_from(data.len()).map_err(|_| "jpeg too large".to_owned())?;
    let mut out = RgbImage::new(w, h);
    let mut msg = [0 as std::ffi::c_char; 256];
    // SAFETY: `data` is a live slice of `len` bytes; `out.pixels` holds
    // exactly w * h * 3 bytes (RgbImage::new); `msg` is a live buffer of
    // msg.len() bytes. The C side writes nothing past these bounds and
    // keeps no pointer after returning.
    let rc = unsafe {
        sys::stoker_jpeg_decode_region(
            data.as_ptr(),
            len,
            x,
            y,
            w,
            h,
            out.pixels.as_mut_ptr(),
            msg.as_mut_ptr(),
            msg.len(),
        )
    };
    if rc == 0 {
        Ok(out)
    } else {
        // SAFETY: the C side always NUL-terminates `msg` within its length
        // (snprintf / strncpy with an explicit terminator); it starts zeroed.
        let text = unsafe { std::ffi::CStr::from_ptr(msg.as_ptr()) };
        Err(text.to_string_lossy().into_owned())
    }
}

/// Without libjpeg-turbo in the build there is no region decoder.
#[cfg(not(stoker_libjpeg))]
pub fn decode_region(_data: &[u8], _x: u32, _y: u32, _w: u32, _h: u32) -> Result<RgbImage, String> {
    Err("built without libjpeg-turbo".to_owned())
}

#[cfg(all(test, stoker_libjpeg))]
mod tests {
    use super::*;
    use stoker_formats::image::ImageKind;
    use stoker_image::decode::decode;

    #[test]
    fn region_matches_the_same_box_of_a_full_decode() {
        let img = stoker_synth::procedural(203, 157, 9);
        let jpeg = stoker_synth::encode_jpeg(&img, 92).unwrap();
        let full = decode_region(&jpeg, 0, 0, 203, 157).unwrap();
        let zune = decode(ImageKind::Jpeg, &jpeg, 1 << 30).unwrap();
        let mad = full
            .pixels
            .iter()
            .zip(&zune.pixels)
            .map(|(&a, &b)| (i32::from(a) - i32::from(b)).unsigned_abs())
            .sum::<u32>() as f64
            / full.pixels.len() as f64;
        assert!(mad < 1.5, "libjpeg vs zune-jpeg mean difference {mad}");
        for (x, y, w, h) in [(0, 0, 10, 10), (37, 21, 100, 90), (202, 156, 1, 1), (17, 0, 186, 157)] {
            let part = decode_region(&jpeg, x, y, w, h).unwrap();
            for r in 0..h {
                let got = &part.pixels[(r * w * 3) as usize..((r + 1) * w * 3) as usize];
                let start = (((y + r) * 203 + x) * 3) as usize;
                assert_eq!(
                    got,
                    &full.pixels[start..start + (w * 3) as usize],
                    "box {x},{y} {w}x{h} row {r}"
                );
            }
        }
    }

    #[test]
    fn bad_regions_and_garbage_are_errors() {
        let jpeg = stoker_synth::encode_jpeg(&stoker_synth::procedural(32, 32, 1), 80).unwrap();
        assert!(decode_region(&jpeg, 20, 0, 20, 10).is_err());
        assert!(decode_region(&jpeg, 0, 0, 0, 10).is_err());
        let err = decode_region(b"not a jpeg", 0, 0, 1, 1).unwrap_err();
        assert!(!err.is_empty());
    }
}
