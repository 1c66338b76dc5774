//! The client's conversion of a uint8 HWC batch to the layout and dtype a
//! training step takes: the types that describe it ([`Layout`], [`DType`],
//! [`Normalize`], [`Conversion`]) and [`ConvertKernels`], which launches
//! the kernels of [`CONVERT`].

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};

use crate::error::launch_err;
use crate::launch::THREADS;
use crate::registry::{arch_of, function};
use crate::{CONVERT, KernelError, kernel, load_modules};

/// Memory layout of a batch of images: `[B, 3, H, W]` or `[B, H, W, 3]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    Nchw,
    Nhwc,
}

impl Layout {
    /// `"nchw"` or `"nhwc"`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Nchw => "nchw",
            Self::Nhwc => "nhwc",
        }
    }

    /// The shape of `images` images of `height` x `width` RGB pixels.
    pub fn shape(self, images: usize, height: u32, width: u32) -> [usize; 4] {
        let (h, w) = (height as usize, width as usize);
        match self {
            Self::Nchw => [images, 3, h, w],
            Self::Nhwc => [images, h, w, 3],
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Layout {
    type Err = String;

    /// `nchw` / `nhwc`, in any case.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "nchw" => Ok(Self::Nchw),
            "nhwc" => Ok(Self::Nhwc),
            _ => Err(format!("unknown layout {s:?}: expected nchw or nhwc")),
        }
    }
}

/// Element type of a converted batch. float16 and bfloat16 elements are
/// 16-bit patterns (IEEE binary16, bfloat16), rounded to nearest even.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    U8,
    F32,
    F16,
    Bf16,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::U8 => 1,
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
        }
    }

    /// The name PyTorch and NumPy use: `uint8`, `float32`, `float16`,
    /// `bfloat16`.
    pub fn name(self) -> &'static str {
        match self {
            Self::U8 => "uint8",
            Self::F32 => "float32",
            Self::F16 => "float16",
            Self::Bf16 => "bfloat16",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = String;

    /// `uint8`, `float32`, `float16`, `bfloat16`, or `u8`, `f32`, `f16`,
    /// `bf16`, `half`, `float`, in any case.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "uint8" | "u8" => Ok(Self::U8),
            "float32" | "f32" | "float" => Ok(Self::F32),
            "float16" | "f16" | "half" => Ok(Self::F16),
            "bfloat16" | "bf16" => Ok(Self::Bf16),
            _ => Err(format!(
                "unknown dtype {s:?}: expected uint8, float32, float16 or bfloat16"
            )),
        }
    }
}

/// The per-channel affine map of the float conversions:
/// `out = x * scale[c] + bias[c]` for a byte `x` of channel `c`, one fused
/// multiply-add in float32 on the device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Normalize {
    pub scale: [f32; 3],
    pub bias: [f32; 3],
}

impl Normalize {
    /// `(x / 255 - mean[c]) / std[c]`, folded (in f64, then rounded) into
    /// `scale = 1 / (255 std)`, `bias = -mean / std`. Refuses a mean or std
    /// that is not finite, and a std of zero.
    pub fn from_mean_std(mean: [f32; 3], std: [f32; 3]) -> Result<Self, String> {
        for c in 0..3 {
            if !mean[c].is_finite() {
                return Err(format!("mean of channel {c} is {}: not a finite number", mean[c]));
            }
            if !std[c].is_finite() || std[c] == 0.0 {
                return Err(format!(
                    "std of channel {c} is {}: not a finite non-zero number",
                    std[c]
                ));
            }
        }
        let mut norm = Self {
            scale: [0.0; 3],
            bias: [0.0; 3],
        };
        for c in 0..3 {
            let (m, s) = (f64::from(mean[c]), f64::from(std[c]));
            norm.scale[c] = (1.0 / (255.0 * s)) as f32;
            norm.bias[c] = (-m / s) as f32;
        }
        Ok(norm)
    }

    /// Plain scaling to [0, 1]: `x / 255` (mean 0, std 1).
    pub fn scale_only() -> Self {
        Self {
            scale: [(1.0f64 / 255.0) as f32; 3],
            bias: [0.0; 3],
        }
    }
}

/// What [`ConvertKernels::convert`] makes of a uint8 HWC batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Conversion {
    pub layout: Layout,
    pub dtype: DType,
    /// Ignored for [`DType::U8`], which is only permuted.
    pub norm: Normalize,
}

impl Conversion {
    /// The kernel that runs this conversion; `None` for uint8 NHWC, which
    /// is a plain copy.
    pub fn kernel(&self) -> Option<&'static str> {
        Some(match (self.layout, self.dtype) {
            (Layout::Nchw, DType::F32) => kernel::CONVERT_NCHW_F32,
            (Layout::Nchw, DType::F16) => kernel::CONVERT_NCHW_F16,
            (Layout::Nchw, DType::Bf16) => kernel::CONVERT_NCHW_BF16,
            (Layout::Nchw, DType::U8) => kernel::CONVERT_NCHW_U8,
            (Layout::Nhwc, DType::F32) => kernel::CONVERT_NHWC_F32,
            (Layout::Nhwc, DType::F16) => kernel::CONVERT_NHWC_F16,
            (Layout::Nhwc, DType::Bf16) => kernel::CONVERT_NHWC_BF16,
            (Layout::Nhwc, DType::U8) => return None,
        })
    }

    /// The name of this conversion in errors: its kernel, or the copy.
    fn what(&self) -> &'static str {
        self.kernel().unwrap_or("uint8 nhwc copy")
    }
}

/// Input and output sizes of a conversion of `images` images of `w` x `h`,
/// checked: `(H x W, input bytes, output bytes)`.
fn convert_sizes(
    what: &'static str,
    images: usize,
    (w, h): (u32, u32),
    dtype: DType,
) -> Result<(u32, usize, usize), KernelError> {
    let hw = w
        .checked_mul(h)
        .filter(|&p| p > 0 && p <= u32::MAX / 3)
        .ok_or_else(|| launch_err(what, format!("image size {w}x{h} is out of range")))?;
    if u32::try_from(images).is_err() {
        return Err(launch_err(what, format!("batch of {images} images is out of range")));
    }
    let input = images
        .checked_mul(hw as usize * 3)
        .ok_or_else(|| launch_err(what, format!("{images} images of {w}x{h} overflow the address space")))?;
    let output = input.checked_mul(dtype.size()).ok_or_else(|| {
        launch_err(
            what,
            format!("{images} images of {w}x{h} as {dtype} overflow the address space"),
        )
    })?;
    Ok((hw, input, output))
}

/// Images per launch: the grid's y dimension.
const MAX_GRID_Y: usize = 65_535;

/// The conversion kernels ([`CONVERT`]), loaded into one context: all a
/// client needs on its training GPU.
#[derive(Clone, Debug)]
pub struct ConvertKernels {
    functions: HashMap<&'static str, CudaFunction>,
    /// The architecture the module was compiled for.
    pub arch: (i32, i32),
}

impl ConvertKernels {
    /// Compiles (or takes from the cache) the conversion module for the
    /// context's device and loads it; no other module is compiled.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self, KernelError> {
        let arch = arch_of(ctx)?;
        let modules = load_modules(ctx, &[CONVERT])?;
        let mut functions = HashMap::new();
        for name in CONVERT.kernels {
            functions.insert(*name, function(&modules, &CONVERT, name)?);
        }
        Ok(Self { functions, arch })
    }

    /// Converts `images` uint8 HWC RGB images of `w` x `h` at the front of
    /// `src` into the front of `dst` as `conv` says, on `stream`: elements
    /// of `conv.dtype` (little-endian bytes) in `conv.layout`. Nothing is
    /// waited for. Sizes are checked; zero images do nothing.
    pub fn convert(
        &self,
        stream: &Arc<CudaStream>,
        src: &CudaSlice<u8>,
        dst: &mut CudaSlice<u8>,
        images: usize,
        (w, h): (u32, u32),
        conv: &Conversion,
    ) -> Result<(), KernelError> {
        let what = conv.what();
        let (hw, in_bytes, out_bytes) = convert_sizes(what, images, (w, h), conv.dtype)?;
        if src.len() < in_bytes {
            return Err(launch_err(
                what,
                format!(
                    "source of {} bytes is too small for {images} images of {w}x{h}",
                    src.len()
                ),
            ));
        }
        if dst.len() < out_bytes {
            return Err(launch_err(
                what,
                format!(
                    "destination of {} bytes is too small for {images} images of {w}x{h} as {}",
                    dst.len(),
                    conv.dtype
                ),
            ));
        }
        if images == 0 {
            return Ok(());
        }
        let Some(name) = conv.kernel() else {
            // uint8 NHWC: the input is the output.
            return stream
                .memcpy_dtod(&src.slice(..in_bytes), &mut dst.slice_mut(..in_bytes))
                .map_err(|e| launch_err(what, e));
        };
        let func = self
            .functions
            .get(name)
            .ok_or_else(|| launch_err(name, "kernel not loaded"))?;
        let (src_ptr, src_guard) = src.device_ptr(stream);
        let (dst_ptr, dst_guard) = dst.device_ptr_mut(stream);
        // Four pixels (NCHW) or elements (NHWC) per thread when every
        // image's start stays aligned for word loads and vector stores.
        let size = conv.dtype.size() as u64;
        let vec4 = hw % 4 == 0 && src_ptr % 4 == 0 && dst_ptr % (4 * size) == 0;
        let per_image = match conv.layout {
            Layout::Nchw => hw,
            Layout::Nhwc => hw * 3,
        };
        let threads = if vec4 { per_image / 4 } else { per_image };
        let vec4 = u32::from(vec4);
        let [s0, s1, s2] = conv.norm.scale;
        let [b0, b1, b2] = conv.norm.bias;
        for first in (0..images).step_by(MAX_GRID_Y) {
            let count = (images - first).min(MAX_GRID_Y) as u32;
            // Both fit: `images` fits in u32 (checked above).
            let first = first as u32;
            let config = LaunchConfig {
                grid_dim: (threads.div_ceil(THREADS), count, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut launch = stream.launch_builder(func);
            launch
                .arg(&src_ptr)
                .arg(&dst_ptr)
                .arg(&hw)
                .arg(&first)
                .arg(&vec4)
                .arg(&s0)
                .arg(&s1)
                .arg(&s2)
                .arg(&b0)
                .arg(&b1)
                .arg(&b2);
            // SAFETY: the arguments match the kernel's signature (two
            // pointers, three unsigned ints, six floats). Images first ..
            // first + count of hw pixels are read from `src` and written to
            // `dst`, both checked above to hold all `images`; with vec4 the
            // pointers are aligned as the kernel's word loads and vector
            // stores need (checked above). The guards order the launch
            // after earlier writes to both buffers and record it for later
            // users.
            unsafe { launch.launch(config) }.map_err(|e| launch_err(name, e))?;
        }
        drop(src_guard);
        drop(dst_guard);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_conversion_has_a_registered_kernel_or_is_a_copy() {
        let norm = Normalize::scale_only();
        for layout in [Layout::Nchw, Layout::Nhwc] {
            for dtype in [DType::U8, DType::F32, DType::F16, DType::Bf16] {
                let conv = Conversion { layout, dtype, norm };
                match conv.kernel() {
                    Some(name) => assert!(CONVERT.kernels.contains(&name), "{name} is not registered"),
                    None => assert_eq!((layout, dtype), (Layout::Nhwc, DType::U8)),
                }
                assert_eq!(layout.to_string().parse::<Layout>(), Ok(layout));
                assert_eq!(dtype.to_string().parse::<DType>(), Ok(dtype));
            }
        }
        assert_eq!("BF16".parse::<DType>(), Ok(DType::Bf16));
        assert!("float64".parse::<DType>().is_err_and(|e| e.contains("float64")));
        assert!("chw".parse::<Layout>().is_err());
        assert_eq!(Layout::Nchw.shape(2, 5, 7), [2, 3, 5, 7]);
        assert_eq!(Layout::Nhwc.shape(2, 5, 7), [2, 5, 7, 3]);
    }

    #[test]
    fn convert_kernels_take_the_arguments_the_wrapper_passes() {
        // ConvertKernels::convert pushes: src, dst, hw, first, vec4, s0..s2, b0..b2.
        let params = "const unsigned char* __restrict__ src, OUT_T* __restrict__ dst,";
        assert!(CONVERT.source.contains(params));
        let at = CONVERT.source.find(params).unwrap_or(0);
        let rest = &CONVERT.source[at..];
        let scalars = [
            "unsigned int hw, unsigned int first, unsigned int vec4,",
            "float s0, float s1, float s2, float b0, float b1, float b2",
        ];
        let mut pos = 0;
        for s in scalars {
            let found = rest[pos..]
                .find(s)
                .unwrap_or_else(|| panic!("convert.cu: parameters {s} missing or out of order"));
            pos += found + s.len();
        }
        for name in CONVERT.kernels {
            assert!(
                CONVERT.source.contains(&format!("{name}(STOKER_CONVERT_ARGS(")),
                "{name} does not take the common parameters"
            );
        }
    }

    #[test]
    fn normalize_folds_mean_and_std_and_refuses_bad_ones() {
        let n = Normalize::from_mean_std([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]).expect("imagenet values");
        for c in 0..3 {
            let want = (1.0 / 255.0 - [0.485f64, 0.456, 0.406][c]) / [0.229f64, 0.224, 0.225][c];
            let got = f64::from(1f32.mul_add(n.scale[c], n.bias[c]));
            assert!((got - want).abs() < 1e-6, "channel {c}: {got} vs {want}");
        }
        assert_eq!(
            Normalize::from_mean_std([0.0; 3], [1.0; 3]),
            Ok(Normalize::scale_only())
        );
        let zero = Normalize::from_mean_std([0.5; 3], [0.2, 0.0, 0.2]).expect_err("std 0");
        assert!(zero.contains("std of channel 1"), "{zero}");
        let nan = Normalize::from_mean_std([0.5, 0.5, f32::NAN], [0.2; 3]).expect_err("mean NaN");
        assert!(nan.contains("mean of channel 2"), "{nan}");
        assert!(Normalize::from_mean_std([0.5; 3], [f32::INFINITY; 3]).is_err());
    }

    #[test]
    fn convert_sizes_refuse_what_does_not_fit() {
        let what = kernel::CONVERT_NCHW_F32;
        assert_eq!(convert_sizes(what, 2, (4, 3), DType::F32).ok(), Some((12, 72, 288)));
        assert_eq!(convert_sizes(what, 0, (4, 3), DType::F16).ok(), Some((12, 0, 0)));
        for (images, dims) in [(1, (0, 3)), (1, (3, 0)), (1, (65_536, 65_536)), (1, (u32::MAX, 1))] {
            let e = convert_sizes(what, images, dims, DType::F32).expect_err("out of range");
            assert!(e.to_string().contains("out of range"), "{e}");
        }
        assert!(convert_sizes(what, usize::MAX / 2, (1024, 1024), DType::F32).is_err());
    }
}
