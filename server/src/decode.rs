//! Image decoding on the CPU: JPEG with zune-jpeg, PNG with zune-png, both
//! to 8-bit RGB. The header is read and the pixel count checked before any
//! pixel buffer is allocated, so a decompression bomb costs nothing.

use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;
use zune_png::PngDecoder;

use crate::wds::ImageKind;

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

/// Why an image was not decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("image of {width}x{height} exceeds the limit of {limit} pixels")]
    TooLarge { width: u64, height: u64, limit: u64 },
    #[error("{kind} decode failed: {reason}")]
    Invalid { kind: &'static str, reason: String },
}

fn invalid(kind: &'static str, reason: impl ToString) -> DecodeError {
    DecodeError::Invalid {
        kind,
        reason: reason.to_string(),
    }
}

fn check_size(width: usize, height: usize, limit: u64) -> Result<(), DecodeError> {
    let (w, h) = (width as u64, height as u64);
    if w == 0 || h == 0 {
        return Err(DecodeError::Invalid {
            kind: "image",
            reason: format!("empty image ({w}x{h})"),
        });
    }
    if w.saturating_mul(h) > limit {
        return Err(DecodeError::TooLarge {
            width: w,
            height: h,
            limit,
        });
    }
    Ok(())
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

/// The image kind its magic bytes say.
pub fn sniff(data: &[u8]) -> Option<ImageKind> {
    if data.starts_with(&[0xff, 0xd8, 0xff]) {
        Some(ImageKind::Jpeg)
    } else if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(ImageKind::Png)
    } else {
        None
    }
}

/// Width and height from the header alone, by walking JPEG markers to the
/// first start-of-frame or reading PNG's IHDR. Reads nothing else and
/// allocates nothing, so it is the guard in front of every decoder.
pub fn header_dimensions(kind: ImageKind, data: &[u8]) -> Result<(u32, u32), DecodeError> {
    match kind {
        ImageKind::Jpeg => jpeg_dimensions(data).ok_or_else(|| invalid("jpeg", "no frame header found")),
        ImageKind::Png => {
            if data.len() < 24 || !data.starts_with(b"\x89PNG\r\n\x1a\n") || &data[12..16] != b"IHDR" {
                return Err(invalid("png", "no IHDR header"));
            }
            let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            Ok((be(&data[16..20]), be(&data[20..24])))
        }
    }
}

fn jpeg_dimensions(data: &[u8]) -> Option<(u32, u32)> {
    if !data.starts_with(&[0xff, 0xd8]) {
        return None;
    }
    let mut i = 2;
    loop {
        // Skip fill bytes before a marker.
        while *data.get(i)? == 0xff && *data.get(i + 1)? == 0xff {
            i += 1;
        }
        if *data.get(i)? != 0xff {
            return None;
        }
        let marker = *data.get(i + 1)?;
        i += 2;
        match marker {
            // Markers without a length.
            0xd0..=0xd9 | 0x01 => continue,
            // Start of frame (any coding but DHT, JPG and DAC).
            0xc0..=0xcf if !matches!(marker, 0xc4 | 0xc8 | 0xcc) => {
                let h = u16::from_be_bytes([*data.get(i + 3)?, *data.get(i + 4)?]);
                let w = u16::from_be_bytes([*data.get(i + 5)?, *data.get(i + 6)?]);
                return Some((u32::from(w), u32::from(h)));
            }
            // Start of scan before any frame header: malformed.
            0xda => return None,
            _ => {
                let len = usize::from(u16::from_be_bytes([*data.get(i)?, *data.get(i + 1)?]));
                if len < 2 {
                    return None;
                }
                i += len;
            }
        }
    }
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

/// True when the last end-of-image marker is not followed by another
/// start-of-scan. Marker bytes cannot occur inside entropy-coded data (0xFF
/// is stuffed there), so a file cut anywhere in its scans fails this check,
/// also when an embedded EXIF thumbnail carries an end-of-image marker of
/// its own. zune-jpeg would otherwise fill the missing rows with grey and
/// report success. Scans from the end: a whole file only when truncated.
fn jpeg_is_complete(data: &[u8]) -> bool {
    let Some(eoi) = data.windows(2).rposition(|w| w == [0xff, 0xd9]) else {
        return false;
    };
    !data[eoi..].windows(2).any(|w| w == [0xff, 0xda])
}

/// The checks every JPEG passes before any decoder sees it: a readable
/// header, at most `max_pixels`, and not truncated. Returns the dimensions.
pub fn check_jpeg(data: &[u8], max_pixels: u64) -> Result<(u32, u32), DecodeError> {
    let (w, h) = header_dimensions(ImageKind::Jpeg, data)?;
    check_size(w as usize, h as usize, max_pixels)?;
    if !jpeg_is_complete(data) {
        return Err(invalid(
            "jpeg",
            format!(
                "truncated: no end-of-image marker after the last scan ({} bytes)",
                data.len()
            ),
        ));
    }
    Ok((w, h))
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
        let img = crate::synth::procedural(37, 21, 1);
        let jpeg = crate::synth::encode_jpeg(&img, 80).unwrap();
        assert_eq!(header_dimensions(ImageKind::Jpeg, &jpeg).unwrap(), (37, 21));
        for cut in [0, 1, 2, 5, 20] {
            assert!(header_dimensions(ImageKind::Jpeg, &jpeg[..cut]).is_err());
        }
    }

    #[test]
    fn truncated_jpeg_is_refused_and_trailing_bytes_are_not() {
        let img = crate::synth::procedural(64, 48, 2);
        let jpeg = crate::synth::encode_jpeg(&img, 85).unwrap();
        assert!(decode(ImageKind::Jpeg, &jpeg, 1 << 30).is_ok());
        let err = decode(ImageKind::Jpeg, &jpeg[..jpeg.len() * 2 / 3], 1 << 30).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
        let mut padded = jpeg.clone();
        padded.extend_from_slice(&[0u8; 100]);
        assert!(decode(ImageKind::Jpeg, &padded, 1 << 30).is_ok());
    }
}
