//! [`NpyArray`]: a NumPy array from a `.npy` file (an `npy` field's
//! value, and a mask's), read with its dtype and shape and checked
//! against its data's length.

use bytes::Bytes;

/// A NumPy array from a `.npy` file: its dtype as NumPy writes it (`<f4`,
/// `|u1`), its shape, and its data in C order.
#[derive(Clone, Debug, PartialEq)]
pub struct NpyArray {
    pub dtype: String,
    pub shape: Vec<u64>,
    pub data: Bytes,
}

impl NpyArray {
    /// A segmentation mask as it is delivered: `|u1`, `[1, height, width]`,
    /// a byte per pixel.
    pub fn mask(width: u32, height: u32, data: Bytes) -> Self {
        Self {
            dtype: "|u1".to_owned(),
            shape: vec![1, u64::from(height), u64::from(width)],
            data,
        }
    }

    /// Parses a `.npy` file (format versions 1 to 3). Fortran-ordered and
    /// object arrays are refused, and so is data shorter or longer than
    /// the shape says.
    pub fn parse(file: Bytes) -> Result<Self, String> {
        const MAGIC: &[u8] = b"\x93NUMPY";
        if !file.starts_with(MAGIC) || file.len() < 10 {
            return Err("not a .npy file (no \\x93NUMPY magic)".to_owned());
        }
        let (header_len, start) = match file[6] {
            1 => (usize::from(u16::from_le_bytes([file[8], file[9]])), 10usize),
            2 | 3 if file.len() >= 12 => (u32::from_le_bytes([file[8], file[9], file[10], file[11]]) as usize, 12),
            v => return Err(format!(".npy format version {v} is not one of 1, 2, 3")),
        };
        let end = start
            .checked_add(header_len)
            .filter(|&e| e <= file.len())
            .ok_or_else(|| format!(".npy header of {header_len} bytes runs past the file's end"))?;
        let header = std::str::from_utf8(&file[start..end]).map_err(|_| ".npy header is not text".to_owned())?;
        let descr = dict_value(header, "descr").ok_or(".npy header has no 'descr'")?;
        let dtype = descr.trim().trim_matches(|c| c == '\'' || c == '"').to_owned();
        let itemsize =
            npy_itemsize(&dtype).ok_or_else(|| format!(".npy dtype {dtype:?} is not a plain number type"))?;
        if dict_value(header, "fortran_order").is_some_and(|v| v.trim().starts_with("True")) {
            return Err(".npy array in Fortran order is not supported".to_owned());
        }
        let shape_text = dict_value(header, "shape").ok_or(".npy header has no 'shape'")?;
        let inner = shape_text
            .trim()
            .strip_prefix('(')
            .and_then(|s| s.split(')').next())
            .ok_or_else(|| format!(".npy shape {shape_text:?} is not a tuple"))?;
        let shape = inner
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<u64>()
                    .map_err(|_| format!(".npy shape {shape_text:?} is not a tuple of sizes"))
            })
            .collect::<Result<Vec<u64>, String>>()?;
        let count = shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .and_then(|n| n.checked_mul(itemsize))
            .ok_or_else(|| format!(".npy shape {shape:?} overflows"))?;
        let data = file.slice(end..);
        if data.len() as u64 != count {
            return Err(format!(
                ".npy data is {} bytes, its shape {shape:?} of {dtype} needs {count}",
                data.len()
            ));
        }
        Ok(Self { dtype, shape, data })
    }
}

/// The text after `'key':` in a `.npy` header's Python dict literal, up to
/// the next top-level comma (a tuple's commas are inside parentheses).
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[at..].trim_start().strip_prefix(':')?;
    let mut depth = 0i32;
    for (i, c) in rest.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' | '}' if depth == 0 => return Some(&rest[..i]),
            _ => {}
        }
    }
    Some(rest)
}

/// Bytes per element of a plain NumPy number dtype (`<f4`, `|u1`, `>i8`,
/// `|b1`).
fn npy_itemsize(dtype: &str) -> Option<u64> {
    let mut chars = dtype.chars();
    let order = chars.next()?;
    let kind = chars.next()?;
    let size: u64 = chars.as_str().parse().ok()?;
    let ok = matches!(order, '<' | '>' | '|' | '=')
        && matches!(
            (kind, size),
            ('f', 2 | 4 | 8) | ('i' | 'u', 1 | 2 | 4 | 8) | ('b', 1) | ('c', 8 | 16)
        );
    ok.then_some(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, shape: &str, data: &[u8]) -> Bytes {
        let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        Bytes::from(out)
    }

    #[test]
    fn npy_keeps_dtype_and_shape() {
        let a = NpyArray::parse(npy("<f4", "(2, 3)", &[0u8; 24])).unwrap();
        assert_eq!(
            (a.dtype.as_str(), a.shape.as_slice(), a.data.len()),
            ("<f4", &[2u64, 3][..], 24)
        );
        let s = NpyArray::parse(npy("|u1", "()", &[7])).unwrap();
        assert!(s.shape.is_empty());
        let v = NpyArray::parse(npy("<i8", "(4,)", &[0u8; 32])).unwrap();
        assert_eq!(v.shape, vec![4]);
        assert!(
            NpyArray::parse(npy("<f4", "(2, 3)", &[0u8; 20]))
                .unwrap_err()
                .contains("needs 24")
        );
        assert!(NpyArray::parse(npy("|O", "(1,)", &[0u8; 8])).is_err());
        assert!(NpyArray::parse(Bytes::from_static(b"hello")).is_err());
        let huge = npy("<f8", "(18446744073709551615, 2)", &[]);
        assert!(NpyArray::parse(huge).unwrap_err().contains("overflows"));
    }
}
