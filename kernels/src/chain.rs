//! Chains of nearest geometric steps on the device: [`ChainLink`] (one
//! step's integer map, the layout of `StokerLink` in `resize.cu`),
//! [`Chains`] (a batch's links and tables, checked so that every read a
//! walk makes is inside its image and its tables), and the launch of
//! `stoker_chain_batch_u8_hwc` ([`Kernels::chain_batch_u8_hwc`]). The
//! crop-resize kernel reads through the same links
//! ([`Kernels::rrc_flip_u8_hwc`]).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};

use crate::error::launch_err;
use crate::launch::THREADS;
use crate::{KernelError, Kernels, kernel};

/// Link kinds, as `StokerLink.kind`.
const FIXED: u32 = 0;
const TABLE: u32 = 1;

/// One step of a chain: `StokerLink` in `resize.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChainLink {
    /// Fixed point: Pillow's 16.16 matrix. Tables: `a[0]` and `a[1]` are
    /// the offsets of the column and row tables in [`Chains::tables`].
    pub a: [i64; 6],
    pub kind: u32,
    /// The fill colour, R | G << 8 | B << 16.
    pub fill: u32,
    /// The step's input size.
    pub in_w: u32,
    pub in_h: u32,
}

// SAFETY: `ChainLink` is `repr(C)`, made only of integers with no padding
// (64 bytes: six i64s, then four u32s), and matches the kernel's struct
// field for field.
unsafe impl DeviceRepr for ChainLink {}

/// Packs a colour as the kernels take it.
pub fn pack_rgb(c: [u8; 3]) -> u32 {
    u32::from(c[0]) | u32::from(c[1]) << 8 | u32::from(c[2]) << 16
}

/// One image's chain within a [`Chains`]: links `first..first + count`,
/// from a `src` image to an `out` one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChainSpan {
    pub first: u32,
    pub count: u32,
    pub src: (u32, u32),
    pub out: (u32, u32),
}

/// The links and tables of a batch's chains.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chains {
    pub links: Vec<ChainLink>,
    pub tables: Vec<i32>,
}

impl Chains {
    /// Adds a fixed-point link.
    pub fn fixed(&mut self, a: [i64; 6], (in_w, in_h): (u32, u32), fill: [u8; 3]) {
        self.links.push(ChainLink {
            a,
            kind: FIXED,
            fill: pack_rgb(fill),
            in_w,
            in_h,
        });
    }

    /// Adds a link of column and row tables.
    pub fn table(&mut self, cols: &[i32], rows: &[i32], (in_w, in_h): (u32, u32), fill: [u8; 3]) {
        let at = self.tables.len() as i64;
        self.tables.extend_from_slice(cols);
        self.tables.extend_from_slice(rows);
        self.links.push(ChainLink {
            a: [at, at + cols.len() as i64, 0, 0, 0, 0],
            kind: TABLE,
            fill: pack_rgb(fill),
            in_w,
            in_h,
        });
    }

    /// Checks that walking `span` from any pixel of its output stays in
    /// bounds: each link's input is the previous one's output (the first's
    /// the source), a fixed link's reads are bounds-checked by the kernel,
    /// and a table link's tables lie in [`Chains::tables`], as long as its
    /// output, with entries in `-1..input`.
    pub fn check(&self, span: &ChainSpan) -> Result<(), String> {
        let (first, count) = (span.first as usize, span.count as usize);
        let links = self
            .links
            .get(first..first + count)
            .ok_or_else(|| format!("links {first}..{} of {}", first + count, self.links.len()))?;
        let mut size = span.src;
        for (k, l) in links.iter().enumerate() {
            if (l.in_w, l.in_h) != size {
                return Err(format!(
                    "link {k} takes {}x{}, its input is {}x{}",
                    l.in_w, l.in_h, size.0, size.1
                ));
            }
            let out = links.get(k + 1).map_or(span.out, |next| (next.in_w, next.in_h));
            match l.kind {
                FIXED => {}
                TABLE => {
                    for (offset, n, side) in [(l.a[0], out.0, l.in_w), (l.a[1], out.1, l.in_h)] {
                        let table = usize::try_from(offset)
                            .ok()
                            .and_then(|at| self.tables.get(at..at + n as usize))
                            .ok_or_else(|| format!("link {k}: table at {offset} of {n} is past the tables"))?;
                        if let Some(v) = table.iter().find(|&&v| v < -1 || v >= side as i32) {
                            return Err(format!("link {k}: table entry {v} is outside 0..{side}"));
                        }
                    }
                }
                other => return Err(format!("link {k}: unknown kind {other}")),
            }
            size = out;
        }
        Ok(())
    }

    /// The links and tables on the device (a one-element buffer for none:
    /// the kernels take a pointer either way).
    pub(crate) fn upload(
        &self,
        stream: &Arc<CudaStream>,
    ) -> Result<(CudaSlice<ChainLink>, CudaSlice<i32>), cudarc::driver::DriverError> {
        let links = if self.links.is_empty() {
            stream.clone_htod(&[ChainLink::default()])?
        } else {
            stream.clone_htod(&self.links)?
        };
        let tables = if self.tables.is_empty() {
            stream.clone_htod(&[0i32])?
        } else {
            stream.clone_htod(&self.tables)?
        };
        Ok((links, tables))
    }
}

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
    /// Bytes per source row, at least `3 * src_w`.
    pub src_pitch: u32,
    pub reserved: u32,
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
    /// `params[i].src` through its links and writes `params[i].dst`.
    ///
    /// # Safety
    ///
    /// Each `src` must be a live device allocation of this context of at
    /// least `src_pitch * src_h` bytes, and each `dst` one of at least
    /// `out_w * out_h * 3` bytes that no other image of the batch reads or
    /// writes, both alive and otherwise unused until the launch has
    /// finished on `stream`. The links and sizes are checked
    /// ([`Chains::check`]); the addresses cannot be.
    pub unsafe fn chain_batch_u8_hwc(
        &self,
        stream: &Arc<CudaStream>,
        params: &[ChainParams],
        chains: &Chains,
    ) -> Result<(), KernelError> {
        let name = kernel::CHAIN_BATCH_U8_HWC;
        if params.is_empty() {
            return Ok(());
        }
        let batch = u32::try_from(params.len())
            .ok()
            .filter(|&n| n <= 65_535)
            .ok_or_else(|| launch_err(name, format!("batch of {} images is over 65535", params.len())))?;
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
            if u64::from(p.src_pitch) < 3 * u64::from(p.src_w) {
                return Err(launch_err(
                    name,
                    format!("image {i}: row pitch {} is under 3 x width {}", p.src_pitch, p.src_w),
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
        let config = LaunchConfig {
            grid_dim: (most.div_ceil(THREADS).clamp(1, 256), batch, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(&self.chain_batch);
        launch.arg(&params_dev).arg(&links).arg(&tables);
        // SAFETY: the argument list matches the kernel's signature (params,
        // links, tables); every link a walk reads is one of its image's span
        // and every table read is inside `tables` (checked above), each
        // source read is inside its src_w x src_h image (the first link's
        // input, checked above, bounds-checked per fixed link, table entries
        // checked), and each write one of out_w x out_h pixels of `dst`, in
        // the allocations the caller promises.
        unsafe { launch.launch(config) }.map_err(|e| launch_err(name, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RESIZE;

    #[test]
    fn layouts_match_the_cuda_structs() {
        assert_eq!((size_of::<ChainLink>(), align_of::<ChainLink>()), (64, 8));
        assert_eq!((size_of::<ChainParams>(), align_of::<ChainParams>()), (48, 8));
        for (name, fields) in [
            (
                "struct StokerLink {",
                &[
                    "long long a[6];",
                    "unsigned int kind;",
                    "unsigned int fill;",
                    "unsigned int in_w;",
                    "unsigned int in_h;",
                ][..],
            ),
            (
                "struct StokerChainParams {",
                &[
                    "unsigned long long src;",
                    "unsigned long long dst;",
                    "unsigned int src_w;",
                    "unsigned int src_h;",
                    "unsigned int out_w;",
                    "unsigned int out_h;",
                    "unsigned int first;",
                    "unsigned int count;",
                    "unsigned int src_pitch;",
                    "unsigned int reserved;",
                ][..],
            ),
        ] {
            let mut at = RESIZE
                .source
                .find(name)
                .unwrap_or_else(|| panic!("resize.cu lacks {name}"));
            for f in fields {
                let pos = RESIZE.source[at..]
                    .find(f)
                    .unwrap_or_else(|| panic!("resize.cu: {name} field {f} missing or out of order"));
                at += pos + f.len();
            }
        }
    }

    #[test]
    fn check_refuses_walks_that_leave_their_images() {
        let mut chains = Chains::default();
        // 4x3 source -> pad to 6x3 (table) -> a fixed warp to 5x5.
        chains.table(&[-1, 0, 1, 2, 3, -1], &[0, 1, 2], (4, 3), [0; 3]);
        chains.fixed([65536, 0, 0, 0, 65536, 0], (6, 3), [1, 2, 3]);
        let span = ChainSpan {
            first: 0,
            count: 2,
            src: (4, 3),
            out: (5, 5),
        };
        assert_eq!(chains.check(&span), Ok(()));
        assert!(
            chains
                .check(&ChainSpan { src: (3, 3), ..span })
                .unwrap_err()
                .contains("link 0 takes 4x3")
        );
        assert!(chains.check(&ChainSpan { count: 3, ..span }).is_err());
        // A table entry past its input, and a table past the tables.
        let mut bad = chains.clone();
        bad.tables[3] = 4;
        assert!(bad.check(&span).unwrap_err().contains("entry 4"));
        let mut short = chains.clone();
        short.tables.pop();
        assert!(short.check(&span).unwrap_err().contains("past the tables"));
        // Only the pad, made to give 5x5: its 3-row table has no 5 rows.
        assert!(chains.check(&ChainSpan { count: 1, ..span }).is_err());
    }
}
