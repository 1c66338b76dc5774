//! A run of nearest-neighbour geometric steps as one exact pass.
//!
//! Flips, nearest warps (rotations with or without `expand`, RandomAffine,
//! the policies' shears and translations), pads of every mode and crops
//! resized with nearest each send an output pixel to one input pixel, or to
//! their fill. A [`Chain`] holds a run of such steps as [`Link`]s: an output
//! pixel walks the links from the last step back to the first, each with
//! that step's own rounding and bounds (Pillow's 16.16 fixed point, its
//! tabulated scale path, numpy's pad indexing), and reads one pixel of the
//! source, or takes the fill of the step where it fell outside. The result
//! is what running the steps one by one gives, byte for byte, but only the
//! output's pixels are computed and no intermediate image is written. A
//! crop-resize after the run (any filter) reads its box through the chain
//! ([`Chain::render_box`]).
//!
//! Steps that never read outside fold into a neighbouring link, exactly
//! (each fold is an integer identity, so the bytes do not move): a flip
//! into the link before it, a flip of the source into the link after it,
//! and a crop inside the output into the link before it. Seed 000's
//! flip + flip + rotation + crop is one link.
//!
//! The GPU lanes evaluate the same links (`stoker_cuda::ChainLink`).

use stoker_core::{Interpolation, Rect, Step, Warp};

use super::geometry::{coord, fits_fixed, fixed_matrix, pad_index};
use crate::decode::RgbImage;

/// One step of a [`Chain`]: where an output pixel of the step reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Link {
    /// Pillow's nearest warp in 16.16 fixed point: output (x, y) reads
    /// input (`(a2 + y a1 + x a0) >> 16`, `(a5 + y a4 + x a3) >> 16`);
    /// outside `in_w` x `in_h` it is `fill`.
    Fixed {
        a: [i64; 6],
        in_w: u32,
        in_h: u32,
        fill: [u8; 3],
    },
    /// A separable map: output column x reads input column `cols[x]`,
    /// output row y input row `rows[y]`; -1 is `fill`. Pillow's scale
    /// path (its columns and rows accumulated in floating point), crops
    /// and pads.
    Table {
        cols: Vec<i32>,
        rows: Vec<i32>,
        in_w: u32,
        in_h: u32,
        fill: [u8; 3],
    },
}

/// Consecutive nearest geometric steps on a `src_w` x `src_h` image,
/// making an `out_w` x `out_h` one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub src_w: u32,
    pub src_h: u32,
    pub out_w: u32,
    pub out_h: u32,
    /// In step order: the first step's link first.
    pub links: Vec<Link>,
}

impl Chain {
    /// No step yet: the identity on a `w` x `h` image.
    pub fn new(w: u32, h: u32) -> Self {
        Self {
            src_w: w,
            src_h: h,
            out_w: w,
            out_h: h,
            links: Vec::new(),
        }
    }

    /// The leading steps of `steps` that chain, as a chain on a `w` x `h`
    /// image, and how many they are.
    pub fn leading(steps: &[Step], w: u32, h: u32) -> (Self, usize) {
        let mut chain = Self::new(w, h);
        let taken = steps.iter().take_while(|s| chain.push(s)).count();
        (chain, taken)
    }

    /// Appends `step` and says true, or says false and stays as it was
    /// when `step` is not a nearest map (or is one on an empty image, or
    /// with coordinates past Pillow's fixed-point range: the executor's own
    /// code runs those).
    pub fn push(&mut self, step: &Step) -> bool {
        let (w, h) = (self.out_w, self.out_h);
        if w == 0 || h == 0 {
            return false;
        }
        match *step {
            Step::FlipHorizontal => self.flip(true),
            Step::FlipVertical => self.flip(false),
            Step::Affine {
                matrix: a,
                out_w,
                out_h,
                warp: Warp::Nearest,
                fill,
            } => {
                let link = if a[1] == 0.0 && a[3] == 0.0 {
                    // Pillow's ImagingScaleAffine, as geometry::affine.
                    Link::Table {
                        cols: scale_table(a[2] + a[0] * 0.5, a[0], out_w, w),
                        rows: scale_table(a[5] + a[4] * 0.5, a[4], out_h, h),
                        in_w: w,
                        in_h: h,
                        fill,
                    }
                } else {
                    let (ow, oh) = (f64::from(out_w), f64::from(out_h));
                    let corners = [(0.0, 0.0), (ow, oh), (0.0, oh), (ow, 0.0)];
                    if !corners.iter().all(|&(x, y)| fits_fixed(&a, x, y)) {
                        return false;
                    }
                    Link::Fixed {
                        a: fixed_matrix(&a),
                        in_w: w,
                        in_h: h,
                        fill,
                    }
                };
                self.add(link, out_w, out_h);
            }
            Step::CropResize { crop, out_w, out_h, .. } if (crop.width, crop.height) == (out_w, out_h) => {
                if self.fold_crop(crop) {
                    return true;
                }
                // A plain crop (any filter): zeros past the image.
                let one = 1 << 16;
                let link = Link::Fixed {
                    a: [one, 0, crop.left * one, 0, one, crop.top * one],
                    in_w: w,
                    in_h: h,
                    fill: [0; 3],
                };
                self.add(link, out_w, out_h);
            }
            Step::CropResize {
                crop,
                out_w,
                out_h,
                filter: Interpolation::Nearest | Interpolation::NearestExact,
            } => {
                // The crop (zeros past the image), then Pillow's nearest
                // resize of it: its scale path, fill 0.
                let sx = f64::from(crop.width) / f64::from(out_w);
                let sy = f64::from(crop.height) / f64::from(out_h);
                let shift = |table: Vec<i32>, start: i64, side: u32| {
                    table
                        .into_iter()
                        .map(|c| {
                            let v = start + i64::from(c);
                            if c < 0 || v < 0 || v >= i64::from(side) {
                                -1
                            } else {
                                v as i32
                            }
                        })
                        .collect()
                };
                let link = Link::Table {
                    cols: shift(scale_table(sx * 0.5, sx, out_w, crop.width), crop.left, w),
                    rows: shift(scale_table(sy * 0.5, sy, out_h, crop.height), crop.top, h),
                    in_w: w,
                    in_h: h,
                    fill: [0; 3],
                };
                self.add(link, out_w, out_h);
            }
            Step::Pad {
                ltrb: [l, t, r, b],
                mode,
                fill,
            } => {
                let side = |before: u32, n: u32, after: u32| -> Vec<i32> {
                    (0..i64::from(n) + i64::from(before) + i64::from(after))
                        .map(|i| pad_index(i - i64::from(before), i64::from(n), mode) as i32)
                        .collect()
                };
                let link = Link::Table {
                    cols: side(l, w, r),
                    rows: side(t, h, b),
                    in_w: w,
                    in_h: h,
                    fill,
                };
                self.add(link, w + l + r, h + t + b);
            }
            _ => return false,
        }
        true
    }

    fn add(&mut self, mut link: Link, out_w: u32, out_h: u32) {
        if let [only] = self.links.as_slice()
            && let Some(flips) = source_flips(only, self.src_w, self.src_h)
        {
            // The only link is a flip of the source: it folds into this one.
            fold_flips_after(&mut link, flips, (self.src_w, self.src_h));
            self.links.clear();
        }
        self.links.push(link);
        (self.out_w, self.out_h) = (out_w, out_h);
    }

    /// Folds a crop that lies inside the output into the last link (its
    /// every pixel is one of the link's, so the link's own bounds and fill
    /// still decide); false when it cannot (no link, or a box past the
    /// output: its zeros need a link of their own).
    fn fold_crop(&mut self, crop: Rect) -> bool {
        if !crop.inside(self.out_w, self.out_h) {
            return false;
        }
        let (left, top) = (crop.left, crop.top);
        match self.links.last_mut() {
            // Output (x, y) of the crop is (x + left, y + top) of the link.
            Some(Link::Fixed { a, .. }) => {
                a[2] += left * a[0] + top * a[1];
                a[5] += left * a[3] + top * a[4];
            }
            Some(Link::Table { cols, rows, .. }) => {
                let (l, t) = (left as usize, top as usize);
                *cols = cols[l..l + crop.width as usize].to_vec();
                *rows = rows[t..t + crop.height as usize].to_vec();
            }
            None => return false,
        }
        (self.out_w, self.out_h) = (crop.width, crop.height);
        true
    }

    /// A flip of the current output. It never reads outside, so it folds
    /// into the previous link, exactly: a fixed-point map evaluated at the
    /// mirrored coordinate is the same integer map with other constants,
    /// and a table is read backwards. Only a flip of the source itself
    /// is a link of its own.
    fn flip(&mut self, horizontal: bool) {
        let (w, h) = (self.out_w, self.out_h);
        match self.links.last_mut() {
            Some(Link::Fixed { a, .. }) => {
                // x -> (w - 1 - x): a2 + (w - 1) a0 - x a0 (and a5, a3).
                let (n, i, j) = if horizontal {
                    (i64::from(w) - 1, 0, 3)
                } else {
                    (i64::from(h) - 1, 1, 4)
                };
                a[2] += n * a[i];
                a[5] += n * a[j];
                a[i] = -a[i];
                a[j] = -a[j];
            }
            Some(Link::Table { cols, rows, .. }) => {
                if horizontal {
                    cols.reverse();
                } else {
                    rows.reverse();
                }
            }
            None => {
                let (n, one) = (if horizontal { w } else { h }, 1i64 << 16);
                let mut a = [one, 0, 0, 0, one, 0];
                if horizontal {
                    a[0] = -one;
                    a[2] = (i64::from(n) - 1) * one;
                } else {
                    a[4] = -one;
                    a[5] = (i64::from(n) - 1) * one;
                }
                self.links.push(Link::Fixed {
                    a,
                    in_w: w,
                    in_h: h,
                    fill: [0; 3],
                });
            }
        }
    }

    /// Where output pixel (`x`, `y`) reads the source, or the fill of the
    /// step where it fell outside.
    #[inline]
    pub fn locate(&self, x: u32, y: u32) -> Result<(usize, usize), [u8; 3]> {
        walk(&self.links, i64::from(x), i64::from(y))
    }

    /// The chain's output for the source `img` (`src_w` x `src_h`). The
    /// last link's fixed-point sums step along each row by addition (the
    /// same integers as its products); the links before it are walked
    /// pixel by pixel.
    pub fn render(&self, img: &RgbImage) -> RgbImage {
        debug_assert_eq!((img.width, img.height), (self.src_w, self.src_h));
        let mut out = RgbImage::new(self.out_w, self.out_h);
        let iw = img.width as usize;
        let put = |p: &mut [u8], at: Result<(usize, usize), [u8; 3]>| match at {
            Ok((sx, sy)) => {
                let s = (sy * iw + sx) * 3;
                p.copy_from_slice(&img.pixels[s..s + 3]);
            }
            Err(fill) => p.copy_from_slice(&fill),
        };
        let Some((last, before)) = self.links.split_last() else {
            out.pixels.copy_from_slice(&img.pixels);
            return out;
        };
        for (y, row) in out.pixels.chunks_exact_mut(self.out_w as usize * 3).enumerate() {
            let y = y as i64;
            match last {
                Link::Fixed { a, in_w, in_h, fill } => {
                    let (w, h) = (i64::from(*in_w), i64::from(*in_h));
                    let (mut vx, mut vy) = (a[2] + y * a[1], a[5] + y * a[4]);
                    for p in row.chunks_exact_mut(3) {
                        let (xi, yi) = (vx >> 16, vy >> 16);
                        vx += a[0];
                        vy += a[3];
                        let at = if xi < 0 || yi < 0 || xi >= w || yi >= h {
                            Err(*fill)
                        } else {
                            walk(before, xi, yi)
                        };
                        put(p, at);
                    }
                }
                Link::Table { cols, rows, fill, .. } => {
                    let yi = rows[y as usize];
                    for (p, &xi) in row.chunks_exact_mut(3).zip(cols) {
                        let at = if xi < 0 || yi < 0 {
                            Err(*fill)
                        } else {
                            walk(before, i64::from(xi), i64::from(yi))
                        };
                        put(p, at);
                    }
                }
            }
        }
        out
    }

    /// The box `rect` of the chain's output (zeros past its edges), as a
    /// crop of the rendered output would cut it, rendering nothing else.
    pub fn render_box(&self, img: &RgbImage, rect: Rect) -> RgbImage {
        match self.cropped(rect) {
            Some(boxed) => boxed.render(img),
            // Only an empty output refuses a crop: all of the box is zeros.
            None => RgbImage::new(rect.width, rect.height),
        }
    }

    /// This chain with the box `rect` of its output cut out (zeros past
    /// its edges) as its output; `None` when the output is empty.
    pub fn cropped(&self, rect: Rect) -> Option<Self> {
        let mut boxed = self.clone();
        let crop = Step::CropResize {
            crop: rect,
            out_w: rect.width,
            out_h: rect.height,
            filter: Interpolation::Nearest,
        };
        boxed.push(&crop).then_some(boxed)
    }
}

/// Walks `links` back from their output pixel (`x`, `y`): the source
/// pixel, or the fill of the link where it fell outside.
#[inline]
fn walk(links: &[Link], mut x: i64, mut y: i64) -> Result<(usize, usize), [u8; 3]> {
    for link in links.iter().rev() {
        match link {
            Link::Fixed { a, in_w, in_h, fill } => {
                let xi = (a[2] + y * a[1] + x * a[0]) >> 16;
                let yi = (a[5] + y * a[4] + x * a[3]) >> 16;
                if xi < 0 || yi < 0 || xi >= i64::from(*in_w) || yi >= i64::from(*in_h) {
                    return Err(*fill);
                }
                (x, y) = (xi, yi);
            }
            Link::Table { cols, rows, fill, .. } => {
                let (xi, yi) = (cols[x as usize], rows[y as usize]);
                if xi < 0 || yi < 0 {
                    return Err(*fill);
                }
                (x, y) = (i64::from(xi), i64::from(yi));
            }
        }
    }
    Ok((x as usize, y as usize))
}

/// Which axes `link` mirrors, when it is a flip (or the identity) of the
/// whole `w` x `h` source onto itself: (horizontal, vertical).
fn source_flips(link: &Link, w: u32, h: u32) -> Option<(bool, bool)> {
    let one = 1i64 << 16;
    let Link::Fixed { a, in_w, in_h, .. } = link else {
        return None;
    };
    let axis = |scale: i64, offset: i64, n: u32| match (scale, offset) {
        (s, 0) if s == one => Some(false),
        (s, o) if s == -one && o == (i64::from(n) - 1) * one => Some(true),
        _ => None,
    };
    if (*in_w, *in_h) != (w, h) || a[1] != 0 || a[3] != 0 {
        return None;
    }
    Some((axis(a[0], a[2], w)?, axis(a[4], a[5], h)?))
}

/// Makes `link` (whose input is `w` x `h`) read through flips of that
/// input: a mirrored coordinate of a link is the same link with other
/// constants (`w - 1 - (v >> 16)` is `(w 2^16 - 1 - v) >> 16`), or its
/// table mirrored. A flip never reads outside, so the link's bounds decide
/// as before.
fn fold_flips_after(link: &mut Link, (horizontal, vertical): (bool, bool), (w, h): (u32, u32)) {
    let one = 1i64 << 16;
    let mirror = |row: &mut [i64], n: u32| {
        row[0] = -row[0];
        row[1] = -row[1];
        row[2] = i64::from(n) * one - 1 - row[2];
    };
    let mirror_table = |table: &mut [i32], n: u32| {
        for v in table.iter_mut().filter(|v| **v >= 0) {
            *v = n as i32 - 1 - *v;
        }
    };
    match link {
        Link::Fixed { a, .. } => {
            if horizontal {
                mirror(&mut a[0..3], w);
            }
            if vertical {
                mirror(&mut a[3..6], h);
            }
        }
        Link::Table { cols, rows, .. } => {
            if horizontal {
                mirror_table(cols, w);
            }
            if vertical {
                mirror_table(rows, h);
            }
        }
    }
}

/// Pillow's scale path along one axis: `n` output positions from `start`
/// in steps of `step` (accumulated, as Pillow does), each the input index
/// it truncates to, or -1 outside `0..side`.
fn scale_table(start: f64, step: f64, n: u32, side: u32) -> Vec<i32> {
    let mut at = start;
    (0..n)
        .map(|_| {
            let i = coord(at);
            at += step;
            if (0..i64::from(side)).contains(&i) {
                i as i32
            } else {
                -1
            }
        })
        .collect()
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
