//! A batch's chains of nearest geometric steps as the kernels take them:
//! [`ChainLink`] (one step's integer map, the layout of `StokerLink` in
//! `resize.cu`) and [`Chains`] (a batch's links and tables, checked so that
//! every read a walk makes is inside its image and its tables). The chain
//! kernel's launch is in `chain.rs`; the crop-resize reads through the same
//! links (`worker.rs`).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};

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
        // No links: each output pixel is the source pixel it stands on.
        if size != span.out {
            return Err(format!(
                "an empty chain takes {}x{} to {}x{}",
                size.0, size.1, span.out.0, span.out.1
            ));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RESIZE;

    #[test]
    fn link_layout_matches_the_cuda_struct() {
        assert_eq!((size_of::<ChainLink>(), align_of::<ChainLink>()), (64, 8));
        let fields = [
            "long long a[6];",
            "unsigned int kind;",
            "unsigned int fill;",
            "unsigned int in_w;",
            "unsigned int in_h;",
        ];
        let mut at = RESIZE
            .source
            .find("struct StokerLink {")
            .expect("resize.cu defines StokerLink");
        for f in fields {
            let pos = RESIZE.source[at..]
                .find(f)
                .unwrap_or_else(|| panic!("resize.cu: StokerLink field {f} missing or out of order"));
            at += pos + f.len();
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
        // No links: the output is the source, not a larger image.
        let none = ChainSpan { count: 0, ..span };
        assert!(
            chains
                .check(&none)
                .unwrap_err()
                .contains("empty chain takes 4x3 to 5x5")
        );
        assert_eq!(chains.check(&ChainSpan { out: (4, 3), ..none }), Ok(()));
    }
}
