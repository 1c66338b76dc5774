//! The launch of Pillow's resampling over a batch (`steps.cu`'s
//! `stoker_resample_batch_u8_hwc`): [`ResampleParams`] (one image's pass
//! along one axis) and [`Kernels::resample_batch_u8_hwc`]. The weights come
//! from the host (`stoker-image`'s port of `precompute_coeffs`), laid out
//! per pass by [`ResampleCoeffs`].

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, PushKernelArg};

use crate::error::launch_err;
use crate::launch::batch_grid;
use crate::{KernelError, Kernels, kernel};

/// One image's pass of [`Kernels::resample_batch_u8_hwc`]: the layout of
/// `StokerResampleParams` in `steps.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResampleParams {
    /// Device address of the source (uint8 HWC, rows of `src_pitch`
    /// bytes).
    pub src: u64,
    /// Device address of the output (uint8 HWC, `out_w` x `out_h`, packed
    /// rows).
    pub dst: u64,
    pub src_pitch: u32,
    pub out_w: u32,
    pub out_h: u32,
    /// 0 resamples along rows (each output column has its input run), 1
    /// along columns.
    pub vertical: u32,
    /// Weights per output.
    pub ksize: u32,
    /// Where this pass's coefficients start in [`ResampleCoeffs::data`].
    pub coeffs: u32,
    /// The horizontal pass reads source rows from `row0` on; the
    /// vertical pass reads input row `first` at source row `first - row0`.
    pub row0: u32,
    pub reserved: u32,
}

// SAFETY: `ResampleParams` is `repr(C)`, made only of integers with no
// padding (48 bytes), and matches the kernel's struct field for field.
unsafe impl DeviceRepr for ResampleParams {}

/// A launch's coefficients: per pass, `(first, count)` for each output,
/// then `ksize` fixed-point weights for each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResampleCoeffs {
    pub data: Vec<i32>,
}

impl ResampleCoeffs {
    /// Appends a pass's runs (`(first, count)` per output) and weights
    /// (`ksize` per output); where they start.
    pub fn add(&mut self, runs: &[(usize, usize)], weights: &[i32]) -> u32 {
        let at = self.data.len() as u32;
        for &(first, count) in runs {
            self.data.push(i32::try_from(first).unwrap_or(i32::MAX));
            self.data.push(i32::try_from(count).unwrap_or(i32::MAX));
        }
        self.data.extend_from_slice(weights);
        at
    }
}

impl ResampleParams {
    /// Checks that every read of the pass stays inside its source of
    /// `src_w` x `src_h` pixels and inside `coeffs`.
    pub fn check(&self, (src_w, src_h): (u32, u32), coeffs: &ResampleCoeffs) -> Result<(), String> {
        if self.src == 0 || self.dst == 0 {
            return Err("null image address".into());
        }
        if self.out_w == 0 || self.out_h == 0 || self.out_w.checked_mul(self.out_h).is_none_or(|p| p > u32::MAX / 3) {
            return Err(format!("output size {}x{} is out of range", self.out_w, self.out_h));
        }
        if u64::from(self.src_pitch) < 3 * u64::from(src_w) {
            return Err(format!("row pitch {} is under 3 x width {src_w}", self.src_pitch));
        }
        let vertical = match self.vertical {
            0 => false,
            1 => true,
            v => return Err(format!("axis {v} is not 0 or 1")),
        };
        let (outs, across) = if vertical {
            (self.out_h, self.out_w)
        } else {
            (self.out_w, self.out_h)
        };
        // The side the pass does not resample keeps its size: the
        // horizontal pass reads rows row0..row0 + out_h.
        let kept = if vertical {
            across <= src_w
        } else {
            u64::from(self.row0) + u64::from(across) <= u64::from(src_h)
        };
        if !kept {
            return Err(format!(
                "{}x{} from rows {} of a {src_w}x{src_h} source",
                self.out_w, self.out_h, self.row0
            ));
        }
        let start = self.coeffs as usize;
        let runs = coeffs
            .data
            .get(start..start + 2 * outs as usize)
            .ok_or_else(|| format!("coefficients at {start} are past the {} given", coeffs.data.len()))?;
        let weights = start + 2 * outs as usize;
        if weights + outs as usize * self.ksize as usize > coeffs.data.len() {
            return Err(format!("weights at {weights} are past the {} given", coeffs.data.len()));
        }
        let side = i64::from(if vertical { src_h } else { src_w });
        for (o, run) in runs.chunks_exact(2).enumerate() {
            let (first, count) = (i64::from(run[0]), i64::from(run[1]));
            // Vertical: input row `first` is source row `first - row0`.
            let at = if vertical { first - i64::from(self.row0) } else { first };
            if count < 0 || count > i64::from(self.ksize) || at < 0 || at + count > side {
                return Err(format!(
                    "output {o}: run {first}+{count} leaves the {side} source pixels"
                ));
            }
        }
        Ok(())
    }
}

impl Kernels {
    /// One resampling pass per image of a batch, in one launch: image `i`
    /// reads `params[i].src` and writes `params[i].dst`.
    ///
    /// # Safety
    ///
    /// Each `src` must be a live device allocation of this context of at
    /// least `src_pitch` bytes times `sources[i].1` rows, and each `dst`
    /// one of at least `out_w * out_h * 3` bytes that no other image of the
    /// batch reads or writes, both alive and otherwise unused until the
    /// launch has finished on `stream`. `sources[i]` is image `i`'s source
    /// size; the passes' reads are checked against it and `coeffs`
    /// ([`ResampleParams::check`]); the addresses cannot be.
    pub(crate) unsafe fn resample_batch_u8_hwc(
        &self,
        stream: &Arc<CudaStream>,
        params: &[ResampleParams],
        sources: &[(u32, u32)],
        coeffs: &ResampleCoeffs,
    ) -> Result<(), KernelError> {
        let name = kernel::RESAMPLE_BATCH_U8_HWC;
        if params.is_empty() {
            return Ok(());
        }
        if sources.len() != params.len() {
            return Err(launch_err(
                name,
                format!("{} passes but {} source sizes", params.len(), sources.len()),
            ));
        }
        let mut most = 0u32;
        for (i, (p, &source)) in params.iter().zip(sources).enumerate() {
            p.check(source, coeffs)
                .map_err(|e| launch_err(name, format!("image {i}: {e}")))?;
            most = most.max(p.out_w * p.out_h);
        }
        let params_dev = stream
            .clone_htod(params)
            .map_err(|e| launch_err(name, format!("copying parameters: {e}")))?;
        let coeffs_dev = stream
            .clone_htod(&coeffs.data)
            .map_err(|e| launch_err(name, format!("copying coefficients: {e}")))?;
        let config = batch_grid(name, params.len(), most)?;
        let mut launch = stream.launch_builder(&self.resample_batch);
        launch.arg(&params_dev).arg(&coeffs_dev);
        // SAFETY: the argument list matches the kernel's signature (params,
        // coefficients); every run and weight a pass reads is inside
        // `coeffs` and every source read inside its source (checked above),
        // and each write one of out_w x out_h pixels of `dst`, in the
        // allocations the caller promises.
        unsafe { launch.launch(config) }.map_err(|e| launch_err(name, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::STEPS;

    #[test]
    fn params_layout_matches_the_cuda_struct() {
        assert_eq!((size_of::<ResampleParams>(), align_of::<ResampleParams>()), (48, 8));
        let fields = [
            "unsigned long long src;",
            "unsigned long long dst;",
            "unsigned int src_pitch;",
            "unsigned int out_w;",
            "unsigned int out_h;",
            "unsigned int vertical;",
            "unsigned int ksize;",
            "unsigned int coeffs;",
            "unsigned int row0;",
            "unsigned int reserved;",
        ];
        let mut at = STEPS
            .source
            .find("struct StokerResampleParams {")
            .expect("steps.cu defines StokerResampleParams");
        for f in fields {
            let pos = STEPS.source[at..]
                .find(f)
                .unwrap_or_else(|| panic!("steps.cu: StokerResampleParams field {f} missing or out of order"));
            at += pos + f.len();
        }
    }

    #[test]
    fn check_refuses_passes_that_read_outside() {
        let mut coeffs = ResampleCoeffs::default();
        // 4 wide to 2: runs (0, 3) and (1, 3), ksize 3.
        let at = coeffs.add(&[(0, 3), (1, 3)], &[1, 2, 3, 4, 5, 6]);
        let pass = ResampleParams {
            src: 1,
            dst: 2,
            src_pitch: 12,
            out_w: 2,
            out_h: 5,
            vertical: 0,
            ksize: 3,
            coeffs: at,
            row0: 1,
            reserved: 0,
        };
        assert_eq!(pass.check((4, 6), &coeffs), Ok(()));
        assert!(pass.check((4, 5), &coeffs).unwrap_err().contains("from rows 1"));
        assert!(pass.check((5, 6), &coeffs).unwrap_err().contains("pitch"));
        let wide = ResampleParams { src_pitch: 9, ..pass };
        assert!(wide.check((3, 6), &coeffs).unwrap_err().contains("leaves"));
        assert!(
            ResampleParams { ksize: 2, ..pass }
                .check((4, 6), &coeffs)
                .unwrap_err()
                .contains("leaves")
        );
        assert!(ResampleParams { coeffs: 4, ..pass }.check((4, 6), &coeffs).is_err());
        assert!(ResampleParams { out_w: 3, ..pass }.check((4, 6), &coeffs).is_err());
        // Vertical: rows 2.. of the filter are rows 0.. of a 4-row source.
        let mut v = ResampleCoeffs::default();
        let at = v.add(&[(2, 2), (4, 2)], &[7, 8, 9, 10]);
        let down = ResampleParams {
            vertical: 1,
            out_w: 4,
            out_h: 2,
            ksize: 2,
            coeffs: at,
            row0: 2,
            ..pass
        };
        assert_eq!(down.check((4, 4), &v), Ok(()));
        assert!(down.check((4, 3), &v).unwrap_err().contains("leaves"));
        assert!(
            ResampleParams { row0: 3, ..down }
                .check((4, 4), &v)
                .unwrap_err()
                .contains("leaves")
        );
    }
}
