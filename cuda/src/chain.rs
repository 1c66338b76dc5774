//! The chain kernel's launch: [`ChainParams`] (one image, the layout of
//! `StokerChainParams` in `resize.cu`) and [`Kernels::chain_batch_u8_hwc`],
//! which renders a batch's chains ([`Chains`]) in one launch.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, PushKernelArg};

use crate::error::launch_err;
use crate::launch::batch_grid;
use crate::{ChainSpan, Chains, KernelError, Kernels, kernel};

/// One image of [`Kernels::chain_batch_u8_hwc`]: `StokerChainParams` in
/// `resize.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChainParams {
    /// Device address of the source image (uint8 HWC, rows of
    /// `src_pitch` bytes).
    pub src: u64,
    /// Device address of the output image (uint8 HWC, packed rows).
    pub dst: u64,
    pub src_w: u32,
    pub src_h: u32,
    pub out_w: u32,
    pub out_h: u32,
    pub first: u32,
    pub count: u32,
    /// Bytes per source row, at least `channels * src_w`.
    pub src_pitch: u32,
    /// 3 (RGB) or 1 (a mask); a fill gives channel `c` its byte `c`.
    pub channels: u32,
}

// SAFETY: `ChainParams` is `repr(C)`, made only of integers with no padding
// (48 bytes), and matches the kernel's struct field for field.
unsafe impl DeviceRepr for ChainParams {}

impl ChainParams {
    /// The span of links this image walks.
    pub fn span(&self) -> ChainSpan {
        ChainSpan {
            first: self.first,
            count: self.count,
            src: (self.src_w, self.src_h),
            out: (self.out_w, self.out_h),
        }
    }
}

impl Kernels {
    /// Renders each image's chain in one launch: image `i` reads
    /// `params[i].src` through its links and writes `params[i].dst`, each
    /// pixel `channels` bytes.
    ///
    /// # Safety
    ///
    /// Each `src` must be a live device allocation of this context of at
    /// least `src_pitch * src_h` bytes, and each `dst` one of at least
    /// `out_w * out_h * channels` bytes that no other image of the batch reads or
    /// writes, both alive and otherwise unused until the launch has
    /// finished on `stream`. The links and sizes are checked
    /// ([`Chains::check`]); the addresses cannot be.
    pub(crate) unsafe fn chain_batch_u8_hwc(
        &self,
        stream: &Arc<CudaStream>,
        params: &[ChainParams],
        chains: &Chains,
    ) -> Result<(), KernelError> {
        let name = kernel::CHAIN_BATCH_U8_HWC;
        if params.is_empty() {
            return Ok(());
        }
        let mut most = 0u32;
        for (i, p) in params.iter().enumerate() {
            let pixels = |w: u32, h: u32| w.checked_mul(h).filter(|&n| n > 0 && n <= u32::MAX / 3);
            let (Some(_), Some(out)) = (pixels(p.src_w, p.src_h), pixels(p.out_w, p.out_h)) else {
                return Err(launch_err(
                    name,
                    format!(
                        "image {i}: size {}x{} to {}x{} is out of range",
                        p.src_w, p.src_h, p.out_w, p.out_h
                    ),
                ));
            };
            if p.src == 0 || p.dst == 0 {
                return Err(launch_err(name, format!("image {i}: null image address")));
            }
            if !matches!(p.channels, 1 | 3) {
                return Err(launch_err(
                    name,
                    format!("image {i}: {} channels (1 or 3 are rendered)", p.channels),
                ));
            }
            if u64::from(p.src_pitch) < u64::from(p.channels) * u64::from(p.src_w) {
                return Err(launch_err(
                    name,
                    format!(
                        "image {i}: row pitch {} is under {} x width {}",
                        p.src_pitch, p.channels, p.src_w
                    ),
                ));
            }
            chains
                .check(&p.span())
                .map_err(|e| launch_err(name, format!("image {i}: {e}")))?;
            most = most.max(out);
        }
        let params_dev = stream
            .clone_htod(params)
            .map_err(|e| launch_err(name, format!("copying parameters: {e}")))?;
        let (links, tables) = chains
            .upload(stream)
            .map_err(|e| launch_err(name, format!("copying links: {e}")))?;
        let config = batch_grid(name, params.len(), most)?;
        let mut launch = stream.launch_builder(&self.chain_batch);
        launch.arg(&params_dev).arg(&links).arg(&tables);
        // SAFETY: the argument list matches the kernel's signature (params,
        // links, tables); every link a walk reads is one of its image's span
        // and every table read is inside `tables` (checked above), each
        // source read is inside its src_w x src_h image (the first link's
        // input, checked above, bounds-checked per fixed link, table entries
        // checked), and each write one of out_w x out_h pixels of
        // `channels` (1 or 3, checked) bytes of `dst`, in the allocations the
        // caller promises.
        unsafe { launch.launch(config) }.map_err(|e| launch_err(name, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RESIZE;

    #[test]
    fn params_layout_matches_the_cuda_struct() {
        assert_eq!((size_of::<ChainParams>(), align_of::<ChainParams>()), (48, 8));
        let fields = [
            "unsigned long long src;",
            "unsigned long long dst;",
            "unsigned int src_w;",
            "unsigned int src_h;",
            "unsigned int out_w;",
            "unsigned int out_h;",
            "unsigned int first;",
            "unsigned int count;",
            "unsigned int src_pitch;",
            "unsigned int channels;",
        ];
        let mut at = RESIZE
            .source
            .find("struct StokerChainParams {")
            .expect("resize.cu defines StokerChainParams");
        for f in fields {
            let pos = RESIZE.source[at..]
                .find(f)
                .unwrap_or_else(|| panic!("resize.cu: StokerChainParams field {f} missing or out of order"));
            at += pos + f.len();
        }
    }
}
