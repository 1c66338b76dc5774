//! The conversion kernels' arithmetic on the host (`convert.cu`), operation
//! for operation: the reference GPU results are checked against, and a way
//! to read float16 / bfloat16 bits back.

use crate::{DType, Layout, Normalize};

/// float32 -> IEEE binary16 bits, round to nearest, ties to even (as
/// `stoker_f16_bits` in `convert.cu`).
pub fn f16_bits(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let a = x & 0x7fff_ffff;
    if a > 0x7f80_0000 {
        return sign | 0x7e00;
    }
    if a >= 0x477f_f000 {
        return sign | 0x7c00;
    }
    if a >= 0x3880_0000 {
        let r = a - 0x3800_0000 + 0x0fff + ((a >> 13) & 1);
        return sign | (r >> 13) as u16;
    }
    let e = a >> 23;
    if e < 102 {
        return sign;
    }
    let m = (a & 0x7f_ffff) | 0x80_0000;
    let shift = 126 - e;
    let mut q = m >> shift;
    let rest = m & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    if rest > half || (rest == half && q & 1 == 1) {
        q += 1;
    }
    sign | q as u16
}

/// IEEE binary16 bits -> float32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let mant = f32::from(h & 0x3ff);
    match exp {
        0 => sign * mant * 2f32.powi(-24),
        31 if mant == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        _ => sign * (1.0 + mant / 1024.0) * 2f32.powi(exp - 15),
    }
}

/// float32 -> bfloat16 bits, round to nearest, ties to even (as
/// `stoker_bf16_bits`).
pub fn bf16_bits(f: f32) -> u16 {
    let x = f.to_bits();
    if x & 0x7fff_ffff > 0x7f80_0000 {
        return ((x >> 16) | 0x0040) as u16;
    }
    ((x + 0x7fff + ((x >> 16) & 1)) >> 16) as u16
}

/// bfloat16 bits -> float32 (exact).
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// The float32 value a conversion kernel computes for byte `x` of channel
/// `c`: one fused multiply-add, as `fmaf` on the device.
pub fn affine(x: u8, c: usize, norm: &Normalize) -> f32 {
    f32::from(x).mul_add(norm.scale[c], norm.bias[c])
}

/// What [`crate::ConvertKernels::convert`] writes for `images` uint8 HWC
/// RGB images of `width` x `height` in `src`: the output's bytes
/// (little-endian elements), bit for bit.
///
/// # Panics
///
/// When `src` is shorter than `images * height * width * 3` bytes.
pub fn convert(
    src: &[u8],
    images: usize,
    (width, height): (u32, u32),
    layout: Layout,
    dtype: DType,
    norm: &Normalize,
) -> Vec<u8> {
    let hw = width as usize * height as usize;
    let n = images * hw * 3;
    let mut out = Vec::with_capacity(n * dtype.size());
    for i in 0..n {
        // Output element i reads input element `from`, of channel c.
        let (from, c) = match layout {
            Layout::Nhwc => (i, i % 3),
            Layout::Nchw => {
                let (image, rest) = (i / (3 * hw), i % (3 * hw));
                let (c, p) = (rest / hw, rest % hw);
                ((image * hw + p) * 3 + c, c)
            }
        };
        let x = src[from];
        match dtype {
            DType::U8 => out.push(x),
            DType::F32 => out.extend_from_slice(&affine(x, c, norm).to_le_bytes()),
            DType::F16 => out.extend_from_slice(&f16_bits(affine(x, c, norm)).to_le_bytes()),
            DType::Bf16 => out.extend_from_slice(&bf16_bits(affine(x, c, norm)).to_le_bytes()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_rounds_to_nearest_even() {
        let cases: &[(f32, u16)] = &[
            (0.0, 0x0000),
            (-0.0, 0x8000),
            (1.0, 0x3c00),
            (-2.0, 0xc000),
            (65504.0, 0x7bff),
            (65519.0, 0x7bff),
            (65520.0, 0x7c00),
            (1e9, 0x7c00),
            (f32::INFINITY, 0x7c00),
            (f32::NEG_INFINITY, 0xfc00),
            (2f32.powi(-14), 0x0400),
            (2f32.powi(-24), 0x0001),
            (2f32.powi(-25), 0x0000),             // a tie, to even (zero)
            (2f32.powi(-25) * 1.000_001, 0x0001), // just above the tie
            (3.0 * 2f32.powi(-25), 0x0002),       // 1.5 units: a tie, to even (2)
            (1.0 + 2f32.powi(-11), 0x3c00),       // a tie below, to even
            (1.0 + 3.0 * 2f32.powi(-11), 0x3c02), // a tie above, to even
            (1.0 + 2f32.powi(-11) + 2f32.powi(-20), 0x3c01),
            (0.1, 0x2e66),
            (-2.117_904_1, 0xc03c),
        ];
        for &(f, bits) in cases {
            assert_eq!(f16_bits(f), bits, "f16 of {f:e}: {:04x} != {bits:04x}", f16_bits(f));
        }
        assert!(f16_to_f32(f16_bits(f32::NAN)).is_nan());
        // Round trip of every finite half.
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_finite() {
                assert_eq!(f16_bits(f), h, "{h:04x} -> {f:e}");
            }
        }
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        let cases: &[(f32, u16)] = &[
            (0.0, 0x0000),
            (1.0, 0x3f80),
            (-1.0, 0xbf80),
            (f32::from_bits(0x3f80_8000), 0x3f80), // tie, to even
            (f32::from_bits(0x3f81_8000), 0x3f82), // tie, to even
            (f32::from_bits(0x3f80_8001), 0x3f81),
            (f32::MAX, 0x7f80),
            (f32::from_bits(0x7f7f_7fff), 0x7f7f),
            (f32::NEG_INFINITY, 0xff80),
            (0.1, 0x3dcd),
        ];
        for &(f, bits) in cases {
            assert_eq!(bf16_bits(f), bits, "bf16 of {f:e}: {:04x} != {bits:04x}", bf16_bits(f));
        }
        assert!(bf16_to_f32(bf16_bits(f32::NAN)).is_nan());
        for h in 0..=u16::MAX {
            let f = bf16_to_f32(h);
            if f.is_finite() {
                assert_eq!(bf16_bits(f), h, "{h:04x} -> {f:e}");
            }
        }
    }

    #[test]
    fn reference_layouts_put_each_channel_in_its_place() {
        // Two 1x2 images: pixels (1,2,3) (4,5,6) and (7,8,9) (10,11,12).
        let src: Vec<u8> = (1..=12).collect();
        let plain = Normalize::scale_only();
        let nchw = convert(&src, 2, (2, 1), Layout::Nchw, DType::U8, &plain);
        assert_eq!(nchw, [1, 4, 2, 5, 3, 6, 7, 10, 8, 11, 9, 12]);
        let nhwc = convert(&src, 2, (2, 1), Layout::Nhwc, DType::U8, &plain);
        assert_eq!(nhwc, src);
        let f32s = convert(&src, 2, (2, 1), Layout::Nchw, DType::F32, &plain);
        let second = f32::from_le_bytes(f32s[4..8].try_into().expect("four bytes"));
        assert!((second - 4.0 / 255.0).abs() < 1e-7, "{second}");
        let norm = Normalize::from_mean_std([0.5; 3], [0.25; 3]).expect("a valid mean and std");
        let halves = convert(&[255, 0, 51], 1, (1, 1), Layout::Nhwc, DType::F16, &norm);
        let values: Vec<f32> = halves
            .chunks_exact(2)
            .map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]])))
            .collect();
        assert_eq!(values[..2], [2.0, -2.0]);
        // -1.2 is not a half: the nearest is -1.2001953 (1 + 205/1024).
        assert_eq!(values[2], -1.200_195_3);
    }
}
