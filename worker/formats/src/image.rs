//! Image kinds and the checks every image passes before a decoder sees it.
//!
//! Dimensions are read from the header alone (JPEG markers up to the first
//! start-of-frame, PNG's IHDR) and checked against a pixel limit, so a
//! decompression bomb is refused before anything is allocated. JPEGs cut in
//! their scans are refused too: decoders would fill the missing rows with
//! grey and report success.

/// The kind of image a sample carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    Jpeg,
    Png,
}

/// Why an image was not decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("image of {width}x{height} exceeds the limit of {limit} pixels")]
    TooLarge { width: u64, height: u64, limit: u64 },
    #[error("{kind} decode failed: {reason}")]
    Invalid { kind: &'static str, reason: String },
}

impl DecodeError {
    /// An [`DecodeError::Invalid`] for a `kind` ("jpeg", "png", "image").
    pub fn invalid(kind: &'static str, reason: impl ToString) -> Self {
        Self::Invalid {
            kind,
            reason: reason.to_string(),
        }
    }
}

/// The default pixel limit of worker and GPU lanes: 100 megapixels, well
/// above any training image, far below what a forged header can claim.
pub const DEFAULT_MAX_PIXELS: u64 = 100_000_000;

/// Whether a file named `name` is an image an ImageFolder holds (`stoker
/// pack` packs them): `.jpg`, `.jpeg` or `.png`, in any case.
pub fn is_image_file_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [".jpg", ".jpeg", ".png"].iter().any(|ext| name.ends_with(ext))
}

/// Refuses empty images and images of more than `limit` pixels.
pub fn check_size(width: u64, height: u64, limit: u64) -> Result<(), DecodeError> {
    if width == 0 || height == 0 {
        return Err(DecodeError::invalid("image", format!("empty image ({width}x{height})")));
    }
    if width.saturating_mul(height) > limit {
        return Err(DecodeError::TooLarge { width, height, limit });
    }
    Ok(())
}

/// The image kind its magic bytes say.
pub fn sniff(data: &[u8]) -> Option<ImageKind> {
    if data.starts_with(&[0xff, 0xd8, 0xff]) {
        Some(ImageKind::Jpeg)
    } else if data.starts_with(PNG_SIGNATURE) {
        Some(ImageKind::Png)
    } else {
        None
    }
}

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// Width and height from the header alone, by walking JPEG markers to the
/// first start-of-frame or reading PNG's IHDR. Reads nothing else and
/// allocates nothing, so it is the guard in front of every decoder.
pub fn header_dimensions(kind: ImageKind, data: &[u8]) -> Result<(u32, u32), DecodeError> {
    match kind {
        ImageKind::Jpeg => jpeg_dimensions(data).ok_or_else(|| DecodeError::invalid("jpeg", "no frame header found")),
        ImageKind::Png => {
            if data.len() < 24 || !data.starts_with(PNG_SIGNATURE) || &data[12..16] != b"IHDR" {
                return Err(DecodeError::invalid("png", "no IHDR header"));
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

/// True when the last end-of-image marker is not followed by another
/// start-of-scan. Marker bytes cannot occur inside entropy-coded data (0xFF
/// is stuffed there), so a file cut anywhere in its scans fails this check,
/// also when an embedded EXIF thumbnail carries an end-of-image marker of
/// its own. Scans from the end: a whole file only when truncated.
pub fn jpeg_is_complete(data: &[u8]) -> bool {
    let Some(eoi) = data.windows(2).rposition(|w| w == [0xff, 0xd9]) else {
        return false;
    };
    !data[eoi..].windows(2).any(|w| w == [0xff, 0xda])
}

/// The checks every JPEG passes before any decoder sees it: a readable
/// header, at most `max_pixels`, and not truncated. Returns the dimensions.
pub fn check_jpeg(data: &[u8], max_pixels: u64) -> Result<(u32, u32), DecodeError> {
    let (w, h) = header_dimensions(ImageKind::Jpeg, data)?;
    check_size(u64::from(w), u64::from(h), max_pixels)?;
    if !jpeg_is_complete(data) {
        return Err(DecodeError::invalid(
            "jpeg",
            format!(
                "truncated: no end-of-image marker after the last scan ({} bytes)",
                data.len()
            ),
        ));
    }
    Ok((w, h))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 16x8 baseline JPEG (written by PIL).
    const TINY_JPEG: &[u8] = include_bytes!("../testdata/tiny.jpg");
    /// A 16x8 RGB PNG (written by PIL).
    const TINY_PNG: &[u8] = include_bytes!("../testdata/tiny.png");

    /// `jpeg` with the first SOF0's height and width replaced.
    fn patch_sof0(jpeg: &[u8], width: u16, height: u16) -> Vec<u8> {
        let mut out = jpeg.to_vec();
        let sof = out.windows(2).position(|w| w == [0xff, 0xc0]).expect("sof0");
        out[sof + 5..sof + 7].copy_from_slice(&height.to_be_bytes());
        out[sof + 7..sof + 9].copy_from_slice(&width.to_be_bytes());
        out
    }

    #[test]
    fn real_headers_are_read() {
        assert_eq!(sniff(TINY_JPEG), Some(ImageKind::Jpeg));
        assert_eq!(sniff(TINY_PNG), Some(ImageKind::Png));
        assert_eq!(sniff(b"\x7fELF\x02\x01\x01"), None);
        assert_eq!(header_dimensions(ImageKind::Jpeg, TINY_JPEG), Ok((16, 8)));
        assert_eq!(header_dimensions(ImageKind::Png, TINY_PNG), Ok((16, 8)));
        assert_eq!(check_jpeg(TINY_JPEG, 128), Ok((16, 8)));
        assert_eq!(
            check_jpeg(TINY_JPEG, 127),
            Err(DecodeError::TooLarge {
                width: 16,
                height: 8,
                limit: 127
            })
        );
    }

    #[test]
    fn garbage_and_cut_headers_are_errors_not_panics() {
        for data in [
            &b""[..],
            b"not an image",
            &[0xff, 0xd8, 0xff, 0xe0, 0, 2][..],
            &[0xff; 64],
        ] {
            assert!(header_dimensions(ImageKind::Jpeg, data).is_err());
            assert!(header_dimensions(ImageKind::Png, data).is_err());
            assert!(check_jpeg(data, u64::MAX).is_err());
        }
        for cut in 0..TINY_JPEG.len() / 2 {
            // Cut before the frame header, or in the scan: never accepted.
            assert!(check_jpeg(&TINY_JPEG[..cut], u64::MAX).is_err(), "cut at {cut}");
        }
        for cut in 0..24 {
            assert!(header_dimensions(ImageKind::Png, &TINY_PNG[..cut]).is_err());
        }
    }

    #[test]
    fn bomb_headers_are_refused_from_the_header() {
        let bomb = patch_sof0(TINY_JPEG, 60000, 60000);
        let err = check_jpeg(&bomb, 100_000_000).unwrap_err();
        assert_eq!(
            err,
            DecodeError::TooLarge {
                width: 60000,
                height: 60000,
                limit: 100_000_000
            }
        );
        assert!(err.to_string().contains("exceeds the limit"), "{err}");

        let mut png = TINY_PNG.to_vec();
        png[16..20].copy_from_slice(&60000u32.to_be_bytes());
        png[20..24].copy_from_slice(&60000u32.to_be_bytes());
        let (w, h) = header_dimensions(ImageKind::Png, &png).unwrap();
        let err = check_size(u64::from(w), u64::from(h), 100_000_000).unwrap_err();
        assert!(matches!(err, DecodeError::TooLarge { width: 60000, .. }), "{err}");
        // The product saturates rather than wrapping to a small number.
        assert!(matches!(
            check_size(u64::MAX, 2, u64::MAX - 1),
            Err(DecodeError::TooLarge { .. })
        ));
    }

    #[test]
    fn zero_dimensions_are_refused() {
        let flat = patch_sof0(TINY_JPEG, 16, 0);
        let err = check_jpeg(&flat, u64::MAX).unwrap_err();
        assert!(err.to_string().contains("empty image (16x0)"), "{err}");
    }
}
