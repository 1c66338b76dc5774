//! Resize.

use serde::{Deserialize, Serialize};

use super::crop::resize_scratch;
use super::op_impl::OpImpl;
use crate::Rect;
use crate::params::{Bounds, Cx, ResolveError, Step};
use crate::transform::args::Interpolation;
use crate::transform::args::MAX_OUTPUT_SIZE;
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, construct, optional, required};

/// Resize's `size`: an int (or `[s]`) is the shorter side, `[h, w]` the
/// exact size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ResizeSize {
    Shorter(u32),
    Sides(Vec<u32>),
}

/// torchvision's `Resize` (PIL always antialiases; `antialias` is accepted
/// and has no effect, as on PIL images).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resize {
    pub size: Option<ResizeSize>,
    pub interpolation: Interpolation,
    pub max_size: Option<u32>,
    pub antialias: Option<bool>,
}

impl Described for Resize {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Resized: an int size is the shorter side (at most max_size for the longer), [h, w] the exact size.",
        origin: Origin::Torchvision,
        role: Role::Geometry,
        args: &[
            required(
                "size",
                ArgKind::ResizeSize,
                "the shorter side, or [h, w]; None with max_size bounds the longer side only",
            ),
            optional(
                "interpolation",
                ArgKind::Interpolation,
                "\"bilinear\"",
                "the resize's filter",
            ),
            optional("max_size", ArgKind::OptInt, "null", "largest longer side"),
            optional(
                "antialias",
                ArgKind::OptBool,
                "true",
                "antialias when downscaling (PIL always does)",
            ),
        ],
    };
}

impl Resize {
    /// The shorter side to `shorter`, keeping the aspect ratio.
    pub fn shorter(shorter: u32) -> Self {
        construct(serde_json::json!({ "size": shorter }))
    }

    /// The requested shorter side, or the exact (w, h).
    fn target(&self) -> Target {
        match &self.size {
            Some(ResizeSize::Shorter(s)) => Target::Shorter(*s),
            Some(ResizeSize::Sides(v)) if v.len() == 1 => Target::Shorter(v[0]),
            Some(ResizeSize::Sides(v)) if v.len() == 2 => Target::Exact(v[1], v[0]),
            _ => Target::Longer,
        }
    }

    /// torchvision's `_compute_resized_output_size` for a `w` x `h` image.
    fn output(&self, w: u64, h: u64) -> (u64, u64) {
        let (w, h) = (w.max(1), h.max(1));
        let (short, long) = (w.min(h), w.max(h));
        let (mut new_short, mut new_long) = match self.target() {
            Target::Exact(ow, oh) => return (u64::from(ow), u64::from(oh)),
            Target::Shorter(s) => (u64::from(s), u64::from(s).saturating_mul(long) / short),
            Target::Longer => {
                let m = u64::from(self.max_size.unwrap_or(1));
                (m.saturating_mul(short) / long, m)
            }
        };
        if let Some(m) = self.max_size.map(u64::from)
            && new_long > m
        {
            (new_short, new_long) = (m.saturating_mul(new_short) / new_long, m);
        }
        let (new_short, new_long) = (new_short.max(1), new_long.max(1));
        if w <= h {
            (new_short, new_long)
        } else {
            (new_long, new_short)
        }
    }
}

enum Target {
    Shorter(u32),
    Exact(u32, u32),
    /// `size=None`: the longer side to `max_size`.
    Longer,
}

impl OpImpl for Resize {
    fn validate(&self) -> Result<(), String> {
        let side_ok = |s: u32| (1..=MAX_OUTPUT_SIZE).contains(&s);
        match &self.size {
            Some(ResizeSize::Shorter(s)) if !side_ok(*s) => {
                return Err(format!("size {s} must lie in [1, {MAX_OUTPUT_SIZE}]"));
            }
            Some(ResizeSize::Sides(v)) if !(1..=2).contains(&v.len()) => {
                return Err(format!("size must be an int or [h, w], got {} values", v.len()));
            }
            Some(ResizeSize::Sides(v)) if !v.iter().all(|&s| side_ok(s)) => {
                return Err(format!("size {v:?} must lie in [1, {MAX_OUTPUT_SIZE}]"));
            }
            Some(ResizeSize::Sides(v)) if v.len() == 2 && self.max_size.is_some() => {
                return Err("max_size is only allowed when size is an int".to_owned());
            }
            None if self.max_size.is_none() => return Err("size=None needs max_size".to_owned()),
            _ => {}
        }
        if let Some(m) = self.max_size {
            if !side_ok(m) {
                return Err(format!("max_size {m} must lie in [1, {MAX_OUTPUT_SIZE}]"));
            }
            if let Target::Shorter(s) = self.target()
                && m <= s
            {
                return Err(format!("max_size {m} must be larger than size {s}"));
            }
        }
        Ok(())
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        if let Target::Exact(w, h) = self.target() {
            return Bounds::exact(u64::from(w), u64::from(h));
        }
        if let Some((w, h)) = b.fixed() {
            let (w, h) = self.output(w, h);
            return Bounds::exact(w, h);
        }
        // The longer side grows most from the shortest short side.
        let short = b.min_w.min(b.min_h).max(1);
        let long = b.max_w.max(b.max_h);
        let (s, l) = self.output(short, long);
        let lo = s.min(l).min(match self.target() {
            Target::Shorter(s) => u64::from(s),
            _ => 1,
        });
        Bounds {
            min_w: lo.max(1),
            min_h: lo.max(1),
            max_w: l.max(s),
            max_h: l.max(s),
        }
    }

    fn scratch(&self, inp: Bounds, out: Bounds) -> u64 {
        resize_scratch(inp, out)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let (nw, nh) = self.output(u64::from(cx.w), u64::from(cx.h));
        let (nw, nh) = (
            u32::try_from(nw).unwrap_or(u32::MAX),
            u32::try_from(nh).unwrap_or(u32::MAX),
        );
        if (nw, nh) != (cx.w, cx.h) {
            cx.push(Step::CropResize {
                crop: Rect::whole(cx.w, cx.h),
                out_w: nw,
                out_h: nh,
                filter: self.interpolation,
            });
        }
        Ok(())
    }
}
