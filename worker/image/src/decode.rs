//! Image decoding on the CPU: JPEG with zune-jpeg, PNG with zune-png, both
//! to 8-bit RGB. The header is read and the pixel count checked before any
//! pixel buffer is allocated, so a decompression bomb costs nothing.
//!
//! The header checks themselves live in [`stoker_formats::image`] (fuzzed
//! on their own) and are re-exported here.

use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;
use zune_png::PngDecoder;

use stoker_formats::image;
pub use stoker_formats::image::{DecodeError, ImageKind, check_jpeg, header_dimensions, sniff};

/// An 8-bit RGB image, HWC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RgbImage {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

impl RgbImage {
    pub fn new(width: u32, height: u32) -> Self {
        Self {
            width,
            height,
            pixels: vec![0; width as usize * height as usize * 3],
        }
    }
}

fn invalid(kind: &'static str, reason: impl ToString) -> DecodeError {
    DecodeError::invalid(kind, reason)
}

fn check_size(width: usize, height: usize, limit: u64) -> Result<(), DecodeError> {
    image::check_size(width as u64, height as u64, limit)
}

/// Decodes `data` to RGB, refusing images with more than `max_pixels`.
pub fn decode(kind: ImageKind, data: &[u8], max_pixels: u64) -> Result<RgbImage, DecodeError> {
    match kind {
        ImageKind::Jpeg => decode_jpeg(data, max_pixels),
        ImageKind::Png => decode_png(data, max_pixels),
    }
    // Files named .jpg that are PNGs (and the reverse) are common in scraped
    // datasets; sniff the magic bytes rather than trusting the name.
    .or_else(|first| match (kind, sniff(data)) {
        (ImageKind::Jpeg, Some(ImageKind::Png)) => decode_png(data, max_pixels),
        (ImageKind::Png, Some(ImageKind::Jpeg)) => decode_jpeg(data, max_pixels),
        _ => Err(first),
    })
}

/// A segmentation mask, decoded for its image of `(width, height)`: a PNG
/// or JPEG of that size, an 8-bit image whose first channel is each
/// pixel's class (a grayscale PNG's value). A palette PNG is refused: its
/// colours, not the class indices PIL reads, would come out. `Err` is the
/// reason, for the sample's skip.
pub fn decode_mask(data: &[u8], (width, height): (u32, u32), max_pixels: u64) -> Result<RgbImage, String> {
    let kind = sniff(data).ok_or("not a PNG or JPEG")?;
    if kind == ImageKind::Png && data.get(25) == Some(&3) {
        return Err(
            "a palette PNG (its colours, not class indices, would be read): save it as grayscale (mode L)".into(),
        );
    }
    let (w, h) = header_dimensions(kind, data).map_err(|e| e.to_string())?;
    if (w, h) != (width, height) {
        return Err(format!("mask is {w}x{h}, its image {width}x{height}"));
    }
    decode(kind, data, max_pixels).map_err(|e| e.to_string())
}

fn jpeg_options() -> DecoderOptions {
    // zune's own dimension cap is a second guard; ours is the pixel limit.
    DecoderOptions::default()
        .jpeg_set_out_colorspace(ColorSpace::RGB)
        .set_max_width(1 << 16)
        .set_max_height(1 << 16)
}

fn png_options() -> DecoderOptions {
    DecoderOptions::default()
        .png_set_strip_to_8bit(true)
        .set_max_width(1 << 20)
        .set_max_height(1 << 20)
}

fn decode_jpeg(data: &[u8], max_pixels: u64) -> Result<RgbImage, DecodeError> {
    check_jpeg(data, max_pixels)?;
    let mut d = JpegDecoder::new_with_options(ZCursor::new(data), jpeg_options());
    d.decode_headers().map_err(|e| invalid("jpeg", format!("{e:?}")))?;
    let (w, h) = d.dimensions().ok_or_else(|| invalid("jpeg", "no frame header"))?;
    check_size(w, h, max_pixels)?;
    let size = d
        .output_buffer_size()
        .ok_or_else(|| invalid("jpeg", "output size overflows"))?;
    if size != w * h * 3 {
        return Err(invalid(
            "jpeg",
            format!("unexpected output size {size} for {w}x{h} RGB"),
        ));
    }
    let mut pixels = vec![0u8; size];
    d.decode_into(&mut pixels)
        .map_err(|e| invalid("jpeg", format!("{e:?}")))?;
    Ok(RgbImage {
        width: w as u32,
        height: h as u32,
        pixels,
    })
}

fn decode_png(data: &[u8], max_pixels: u64) -> Result<RgbImage, DecodeError> {
    let (w, h) = header_dimensions(ImageKind::Png, data)?;
    check_size(w as usize, h as usize, max_pixels)?;
    let mut d = PngDecoder::new_with_options(ZCursor::new(data), png_options());
    d.decode_headers().map_err(|e| invalid("png", format!("{e:?}")))?;
    let (w, h) = d.dimensions().ok_or_else(|| invalid("png", "no IHDR"))?;
    check_size(w, h, max_pixels)?;
    let decoded = d.decode().map_err(|e| invalid("png", format!("{e:?}")))?;
    let colorspace = d.colorspace().ok_or_else(|| invalid("png", "unknown colorspace"))?;
    let raw = decoded
        .u8()
        .ok_or_else(|| invalid("png", "not 8-bit after stripping"))?;
    let channels = colorspace.num_components();
    if raw.len() != w * h * channels {
        return Err(invalid("png", format!("{} bytes for {w}x{h}x{channels}", raw.len())));
    }
    let pixels = match channels {
        3 => raw,
        4 => raw.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect(),
        1 => raw.iter().flat_map(|&g| [g, g, g]).collect(),
        2 => raw.chunks_exact(2).flat_map(|p| [p[0], p[0], p[0]]).collect(),
        n => return Err(invalid("png", format!("unsupported channel count {n}"))),
    };
    Ok(RgbImage {
        width: w as u32,
        height: h as u32,
        pixels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for data in [&b""[..], b"not an image", &[0xff, 0xd8, 0xff, 0xe0, 0, 2][..]] {
            assert!(decode(ImageKind::Jpeg, data, 1 << 30).is_err());
            assert!(decode(ImageKind::Png, data, 1 << 30).is_err());
        }
    }

    #[test]
    fn bomb_header_is_refused_before_allocation() {
        // A baseline JPEG header claiming 60000x60000: SOI, SOF0, then EOI.
        let mut jpeg = vec![0xff, 0xd8];
        jpeg.extend_from_slice(&[0xff, 0xc0, 0x00, 0x11, 0x08]);
        jpeg.extend_from_slice(&60000u16.to_be_bytes());
        jpeg.extend_from_slice(&60000u16.to_be_bytes());
        jpeg.extend_from_slice(&[0x03, 0x01, 0x22, 0x00, 0x02, 0x11, 0x01, 0x03, 0x11, 0x01]);
        jpeg.extend_from_slice(&[0xff, 0xd9]);
        let err = decode(ImageKind::Jpeg, &jpeg, 100_000_000).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::TooLarge {
                    width: 60000,
                    height: 60000,
                    ..
                }
            ),
            "{err}"
        );
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(&60000u32.to_be_bytes());
        png.extend_from_slice(&60000u32.to_be_bytes());
        png.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
        let err = decode(ImageKind::Png, &png, 100_000_000).unwrap_err();
        assert!(matches!(err, DecodeError::TooLarge { .. }), "{err}");
    }

    #[test]
    fn header_dimensions_of_a_real_jpeg() {
        let jpeg = crate::testimg::jpeg(37, 21, 1);
        assert_eq!(header_dimensions(ImageKind::Jpeg, &jpeg).unwrap(), (37, 21));
        for cut in [0, 1, 2, 5, 20] {
            assert!(header_dimensions(ImageKind::Jpeg, &jpeg[..cut]).is_err());
        }
    }

    #[test]
    fn truncated_jpeg_is_refused_and_trailing_bytes_are_not() {
        let jpeg = crate::testimg::jpeg(64, 48, 2);
        assert!(decode(ImageKind::Jpeg, &jpeg, 1 << 30).is_ok());
        let err = decode(ImageKind::Jpeg, &jpeg[..jpeg.len() * 2 / 3], 1 << 30).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
        let mut padded = jpeg.clone();
        padded.extend_from_slice(&[0u8; 100]);
        assert!(decode(ImageKind::Jpeg, &padded, 1 << 30).is_ok());
    }
}
