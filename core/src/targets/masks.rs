//! [`Outline`]: one instance's shape as COCO gives it (`segmentation`:
//! polygons, or a run-length encoding), drawn as a mask on its image.
//!
//! Polygons are drawn as pycocotools draws them (`frPyObjects` then
//! `decode`, which torchvision's detection references use to make Mask
//! R-CNN's masks), so the same annotation makes the same pixels: the
//! outline is traced on a grid five times finer, each column's crossings
//! are brought back to the image's grid, and the pixels between crossings
//! are filled. tests/python/masks_oracle.py checks every pixel against
//! pycocotools. An instance of several polygons is their union.

/// The most points one instance's polygons may hold in all (COCO's
/// largest outline has a few thousand).
pub const MAX_POLYGON_POINTS: usize = 1 << 16;

/// The most points of the finer grid one polygon's trace may take (a
/// polygon around a 4000x3000 image takes 70,000): a bound on what a
/// coordinate far outside its image can make a worker allocate.
const MAX_TRACE: i64 = 1 << 24;

/// One instance's shape on its image.
#[derive(Clone, Debug, PartialEq)]
pub enum Outline {
    /// Polygons in the image's pixels, each `[x0, y0, x1, y1, ...]` of at
    /// least three points.
    Polygons(Vec<Vec<f64>>),
    /// Run lengths of the image's pixels in column-major order, first of
    /// 0s then of 1s alternately (COCO's RLE), of an image of `size`
    /// (width, height).
    Runs { size: (u32, u32), counts: Vec<u32> },
}

impl Outline {
    /// COCO's `segmentation` of one instance: a list of polygons, or
    /// `{"counts": [..] or "..", "size": [h, w]}`. Errors say what is
    /// wrong, for the caller to name the instance.
    pub fn from_json(value: &serde_json::Value) -> Result<Self, String> {
        use serde_json::Value;
        match value {
            Value::Array(polygons) => {
                let mut out = Vec::with_capacity(polygons.len());
                let mut points = 0;
                for (i, p) in polygons.iter().enumerate() {
                    let coords: Vec<f64> = p
                        .as_array()
                        .ok_or_else(|| format!("polygon {i} is not a list of numbers"))?
                        .iter()
                        .map(|v| v.as_f64().filter(|x| x.is_finite()))
                        .collect::<Option<_>>()
                        .ok_or_else(|| format!("polygon {i} has a coordinate that is not a finite number"))?;
                    if !coords.len().is_multiple_of(2) {
                        return Err(format!(
                            "polygon {i} has an odd number of coordinates ({})",
                            coords.len()
                        ));
                    }
                    if coords.len() < 6 {
                        return Err(format!("polygon {i} has {} points, fewer than 3", coords.len() / 2));
                    }
                    points += coords.len() / 2;
                    if points > MAX_POLYGON_POINTS {
                        return Err(format!("over {MAX_POLYGON_POINTS} polygon points"));
                    }
                    out.push(coords);
                }
                if out.is_empty() {
                    return Err("no polygons".to_owned());
                }
                Ok(Self::Polygons(out))
            }
            Value::Object(rle) => {
                let size = rle
                    .get("size")
                    .and_then(Value::as_array)
                    .filter(|s| s.len() == 2)
                    .and_then(|s| Some((s[1].as_u64()?, s[0].as_u64()?)))
                    .and_then(|(w, h)| Some((u32::try_from(w).ok()?, u32::try_from(h).ok()?)))
                    .ok_or("rle size is not [height, width]")?;
                let pixels = u64::from(size.0) * u64::from(size.1);
                let counts = match rle.get("counts") {
                    Some(Value::String(s)) => decode_counts(s)?,
                    Some(Value::Array(c)) => c
                        .iter()
                        .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()))
                        .collect::<Option<Vec<u32>>>()
                        .ok_or("rle counts are not non-negative integers")?,
                    _ => return Err("rle has no counts".to_owned()),
                };
                let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
                if total != pixels {
                    return Err(format!(
                        "rle counts cover {total} pixels, its size {}x{} has {pixels}",
                        size.0, size.1
                    ));
                }
                Ok(Self::Runs { size, counts })
            }
            _ => Err("segmentation is neither polygons nor an rle".to_owned()),
        }
    }

    /// As COCO's `segmentation`: polygons, or `{"counts": [..], "size":
    /// [h, w]}`.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Self::Polygons(p) => serde_json::json!(p),
            Self::Runs { size, counts } => serde_json::json!({"counts": counts, "size": [size.1, size.0]}),
        }
    }

    /// Checks the outline against its image of `canvas` (width, height):
    /// an RLE must be the image's size. Polygons may reach past the image
    /// (COCO's do, by a pixel); what is outside is not drawn.
    pub fn check(&self, canvas: (u32, u32)) -> Result<(), String> {
        match self {
            Self::Runs { size, .. } if *size != canvas => Err(format!(
                "rle size {}x{} is not its image's {}x{}",
                size.0, size.1, canvas.0, canvas.1
            )),
            _ => Ok(()),
        }
    }

    /// Sets the outline's pixels to `on` in `out`, an image of `canvas`
    /// (width, height) with `stride` bytes between one pixel and the next
    /// (3 to draw into one channel of an RGB image). `Err` says why it
    /// cannot be drawn: a polygon whose outline is too long to trace.
    pub fn draw(&self, canvas: (u32, u32), out: &mut [u8], stride: usize, on: u8) -> Result<(), String> {
        let (w, h) = (canvas.0 as usize, canvas.1 as usize);
        let mut fill = |counts: &[u32]| {
            let mut at = 0usize;
            for (i, &run) in counts.iter().enumerate() {
                let end = (at + run as usize).min(w * h);
                if i % 2 == 1 {
                    for idx in at..end {
                        // Column-major: down each column, then the next.
                        let (x, y) = (idx / h, idx % h);
                        out[(y * w + x) * stride] = on;
                    }
                }
                at = end;
            }
        };
        match self {
            Self::Runs { counts, .. } => fill(counts),
            Self::Polygons(polygons) => {
                for (i, p) in polygons.iter().enumerate() {
                    fill(&polygon_runs(p, w, h).map_err(|why| format!("polygon {i}: {why}"))?);
                }
            }
        }
        Ok(())
    }

    /// As COCO's uncompressed RLE of `canvas`, for JSON.
    pub fn runs_of(mask: &[u8], canvas: (u32, u32)) -> Vec<u32> {
        let (w, h) = (canvas.0 as usize, canvas.1 as usize);
        let mut counts = Vec::new();
        let (mut value, mut run) = (0u8, 0u32);
        for x in 0..w {
            for y in 0..h {
                let v = u8::from(mask[y * w + x] != 0);
                if v != value {
                    counts.push(run);
                    (value, run) = (v, 0);
                }
                run += 1;
            }
        }
        counts.push(run);
        counts
    }
}

/// COCO's compressed RLE string: each count in 5-bit groups, a character
/// each (offset by 48), the sixth bit saying another group follows and
/// the last group's fifth its sign; from the third count on, each is the
/// difference from the count two before.
fn decode_counts(s: &str) -> Result<Vec<u32>, String> {
    let bytes = s.as_bytes();
    let mut counts: Vec<i64> = Vec::new();
    let mut p = 0;
    while p < bytes.len() {
        let (mut x, mut k) = (0i64, 0u32);
        loop {
            let c = i64::from(bytes[p]) - 48;
            if !(0..64).contains(&c) || k >= 12 {
                return Err(format!("rle counts string has a bad character at {p}"));
            }
            x |= (c & 0x1f) << (5 * k);
            p += 1;
            k += 1;
            if c & 0x20 == 0 {
                if c & 0x10 != 0 {
                    x |= -1i64 << (5 * k);
                }
                break;
            }
            if p == bytes.len() {
                return Err("rle counts string ends inside a count".to_owned());
            }
        }
        if counts.len() > 2 {
            x += counts[counts.len() - 2];
        }
        counts.push(x);
    }
    counts
        .into_iter()
        .map(|c| u32::try_from(c).map_err(|_| format!("rle count {c} is out of range")))
        .collect()
}

/// C's conversion of a double to an int as x86 does it: toward zero, and
/// the lowest int where the value has none (pycocotools' arithmetic).
fn c_int(x: f64) -> i64 {
    if x.is_nan() || x >= 2147483648.0 || x <= -2147483649.0 {
        i64::from(i32::MIN)
    } else {
        x.trunc() as i64
    }
}

/// One polygon's pixels as column-major run lengths of a `w` x `h` image,
/// as pycocotools makes them.
fn polygon_runs(xy: &[f64], w: usize, h: usize) -> Result<Vec<u32>, String> {
    const SCALE: f64 = 5.0;
    // The corners on the finer grid, the outline closed.
    let mut corners: Vec<(i64, i64)> = xy
        .chunks_exact(2)
        .map(|p| (c_int(SCALE * p[0] + 0.5), c_int(SCALE * p[1] + 0.5)))
        .collect();
    let Some(&first) = corners.first() else {
        return Ok(vec![(w * h) as u32]);
    };
    corners.push(first);
    let length: i64 = corners
        .windows(2)
        .map(|e| (e[1].0 - e[0].0).abs().max((e[1].1 - e[0].1).abs()) + 1)
        .sum();
    if length > MAX_TRACE {
        return Err(format!(
            "its outline is {length} steps of a fifth of a pixel, over the limit of {MAX_TRACE}: a point far outside its image"
        ));
    }
    // Every point of the finer grid along each edge, one per step of its
    // longer axis, each edge walked from its lower end on that axis.
    let mut trace: Vec<(i64, i64)> = Vec::with_capacity(length as usize);
    for e in corners.windows(2) {
        let ((mut xs, mut ys), (mut xe, mut ye)) = (e[0], e[1]);
        let (dx, dy) = ((xe - xs).abs(), (ye - ys).abs());
        let flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
        if flip {
            (xs, xe) = (xe, xs);
            (ys, ye) = (ye, ys);
        }
        if dx >= dy {
            let s = (ye - ys) as f64 / dx as f64;
            for d in 0..=dx {
                let t = if flip { dx - d } else { d };
                trace.push((t + xs, c_int(ys as f64 + s * t as f64 + 0.5)));
            }
        } else {
            let s = (xe - xs) as f64 / dy as f64;
            for d in 0..=dy {
                let t = if flip { dy - d } else { d };
                trace.push((c_int(xs as f64 + s * t as f64 + 0.5), t + ys));
            }
        }
    }
    // Where the trace crosses into a new column of the finer grid that is
    // a pixel centre of the image, the first row at or below the crossing.
    let (wf, hf) = (w as f64, h as f64);
    let mut toggles: Vec<u64> = Vec::new();
    for pair in trace.windows(2) {
        let ((u0, v0), (u1, v1)) = (pair[0], pair[1]);
        if u1 == u0 {
            continue;
        }
        let xd = (if u1 < u0 { u1 } else { u1 - 1 }) as f64;
        let xd = (xd + 0.5) / SCALE - 0.5;
        if xd.floor() != xd || xd < 0.0 || xd > wf - 1.0 {
            continue;
        }
        let yd = (v0.min(v1) as f64 + 0.5) / SCALE - 0.5;
        let yd = yd.clamp(0.0, hf).ceil();
        toggles.push((xd as u64) * h as u64 + yd as u64);
    }
    toggles.push((w * h) as u64);
    toggles.sort_unstable();
    // Run lengths between toggles; two toggles at one place cancel.
    let mut runs: Vec<u32> = Vec::with_capacity(toggles.len());
    let mut prev = 0u64;
    let mut gaps = toggles.into_iter().map(|t| {
        let gap = t - prev;
        prev = t;
        gap as u32
    });
    if let Some(first) = gaps.next() {
        runs.push(first);
    }
    while let Some(g) = gaps.next() {
        if g > 0 {
            runs.push(g);
        } else if let Some(next) = gaps.next()
            && let Some(last) = runs.last_mut()
        {
            *last += next;
        }
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drawn(outline: &Outline, (w, h): (u32, u32)) -> Vec<Vec<u8>> {
        let mut out = vec![0u8; (w * h) as usize];
        outline.draw((w, h), &mut out, 1, 1).unwrap();
        out.chunks(w as usize).map(<[u8]>::to_vec).collect()
    }

    fn read(json: serde_json::Value) -> Result<Outline, String> {
        Outline::from_json(&json)
    }

    /// Pixels as pycocotools draws them (`mask.decode(mask.frPyObjects(..))`
    /// printed by pycocotools 2.0; tests/python/instance_masks.py checks
    /// hundreds more against the library itself).
    #[test]
    fn polygons_draw_the_pixels_pycocotools_draws() {
        let square = read(serde_json::json!([[1, 1, 5, 1, 5, 4, 1, 4]])).unwrap();
        let mut want = vec![vec![0u8; 7]; 6];
        for row in &mut want[1..4] {
            row[1..5].fill(1);
        }
        assert_eq!(drawn(&square, (7, 6)), want);
        let triangle = read(serde_json::json!([[0.5, 0.5, 6.2, 0.5, 3, 5.5]])).unwrap();
        assert_eq!(
            drawn(&triangle, (7, 6)),
            [
                [0, 0, 0, 0, 0, 0, 0],
                [0, 1, 1, 1, 1, 1, 0],
                [0, 0, 1, 1, 1, 0, 0],
                [0, 0, 1, 1, 0, 0, 0],
                [0, 0, 0, 1, 0, 0, 0],
                [0, 0, 0, 0, 0, 0, 0],
            ]
        );
        // Two polygons are their union; what reaches past the image is cut.
        let both = read(serde_json::json!([
            [1, 1, 5, 1, 5, 4, 1, 4],
            [-3, -3, 2, -3, 2, 2, -3, 2]
        ]))
        .unwrap();
        let pixels = drawn(&both, (7, 6));
        assert_eq!((pixels[0][0], pixels[1][1], pixels[3][4], pixels[5][6]), (1, 1, 1, 0));
    }

    /// COCO's compressed string and its uncompressed counts draw the same
    /// mask (the string as pycocotools' `encode` wrote it for it).
    #[test]
    fn rles_read_compressed_or_not() {
        let mut want = vec![vec![0u8; 5]; 4];
        want[0][0] = 1;
        for row in &mut want[1..3] {
            row[2..4].fill(1);
        }
        let compressed = read(serde_json::json!({"counts": "0181J03", "size": [4, 5]})).unwrap();
        assert_eq!(drawn(&compressed, (5, 4)), want);
        let flat: Vec<u8> = want.concat();
        let counts = Outline::runs_of(&flat, (5, 4));
        let plain = read(serde_json::json!({"counts": counts, "size": [4, 5]})).unwrap();
        assert_eq!(plain, compressed);
        assert_eq!(Outline::from_json(&plain.to_json()).unwrap(), plain);
        assert_eq!(compressed.check((5, 4)), Ok(()));
        assert_eq!(
            compressed.check((4, 5)).unwrap_err(),
            "rle size 5x4 is not its image's 4x5"
        );
    }

    #[test]
    fn bad_outlines_say_what_is_wrong() {
        for (json, why) in [
            (
                serde_json::json!([[1, 1, 2, 2]]),
                "polygon 0 has 2 points, fewer than 3",
            ),
            (
                serde_json::json!([[1, 1, 2, 2, 3]]),
                "polygon 0 has an odd number of coordinates (5)",
            ),
            (
                serde_json::json!([[1, 1, 2, 2, 3, null]]),
                "polygon 0 has a coordinate that is not a finite number",
            ),
            (serde_json::json!([]), "no polygons"),
            (serde_json::json!([3]), "polygon 0 is not a list of numbers"),
            (
                serde_json::json!({"counts": [1, 2], "size": [2, 2]}),
                "rle counts cover 3 pixels, its size 2x2 has 4",
            ),
            (
                serde_json::json!({"counts": [-1, 5], "size": [2, 2]}),
                "rle counts are not non-negative integers",
            ),
            (
                serde_json::json!({"counts": "0", "size": [2]}),
                "rle size is not [height, width]",
            ),
            (serde_json::json!({"size": [2, 2]}), "rle has no counts"),
            (
                serde_json::json!({"counts": "a", "size": [2, 2]}),
                "rle counts string ends inside a count",
            ),
            (
                serde_json::json!({"counts": " ", "size": [2, 2]}),
                "rle counts string has a bad character at 0",
            ),
            (
                serde_json::json!({"counts": "@", "size": [2, 2]}),
                "rle count -16 is out of range",
            ),
            (
                serde_json::json!("mask.png"),
                "segmentation is neither polygons nor an rle",
            ),
        ] {
            assert_eq!(read(json.clone()).unwrap_err(), why, "{json}");
        }
        let many = vec![vec![0.0; 2 * MAX_POLYGON_POINTS + 2]];
        assert!(read(serde_json::json!(many)).unwrap_err().starts_with("over "));
        // A point far outside its image: refused before the trace is made.
        let far = read(serde_json::json!([[0, 0, 1e9, 0, 1e9, 1e9]])).unwrap();
        let mut out = vec![0u8; 4];
        let e = far.draw((2, 2), &mut out, 1, 1).unwrap_err();
        assert!(e.starts_with("polygon 0: its outline is"), "{e}");
    }
}
