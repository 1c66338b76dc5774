//! Detection targets: a sample's boxes, labels and keypoints, and how
//! they follow the sample's geometry.
//!
//! [`Targets`] holds one image's instances, as torchvision's detection
//! models take them (`boxes`, `labels`, optional `iscrowd` and `area`,
//! `keypoints`), on a canvas of the image's size. Boxes are kept as XYXY
//! in `f64`; [`BoxFormat`] is the format they arrive in and leave in
//! (torchvision's `BoundingBoxFormat`: XYXY, XYWH, CXCYWH).
//!
//! The geometry is decided with the pixels' and from the same draws: while
//! a sample's ops resolve into [`crate::Step`]s, each geometric step also
//! records a [`TargetStep`] ([`TargetStep::of`]), which says how
//! torchvision v2 moves boxes and keypoints through that op
//! (`torchvision/transforms/v2/functional/_geometry.py`): a crop
//! translates and clamps, a resize scales, a pad translates, a flip
//! mirrors (a box about the canvas width, a keypoint about width - 1, as
//! torchvision does), an affine warp maps the four corners and takes
//! their extent, then clamps. Where torchvision's rule for boxes is not
//! the pixels' (a rotation with `expand` places the boxes by the rotated
//! corners' minimum, where PIL centres the image) the op records its
//! own. [`Targets::follow`] applies them on the host, so CPU and GPU
//! workers deliver the same coordinates.

mod follow;

pub use follow::{TargetStep, Unsupported, invert_affine};

/// How four numbers describe a box (torchvision's `BoundingBoxFormat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BoxFormat {
    /// Left, top, right, bottom.
    #[default]
    Xyxy,
    /// Left, top, width, height (COCO's `bbox`).
    Xywh,
    /// Centre x, centre y, width, height (YOLO's, in pixels).
    Cxcywh,
}

impl BoxFormat {
    pub const ALL: [BoxFormat; 3] = [BoxFormat::Xyxy, BoxFormat::Xywh, BoxFormat::Cxcywh];

    /// torchvision's name: `XYXY`, `XYWH`, `CXCYWH`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Xyxy => "XYXY",
            Self::Xywh => "XYWH",
            Self::Cxcywh => "CXCYWH",
        }
    }

    /// A format by torchvision's name, in any case.
    pub fn parse(name: &str) -> Result<Self, TargetError> {
        Self::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| TargetError::Format(name.to_owned()))
    }

    /// A box in this format as XYXY.
    pub fn to_xyxy(self, b: [f64; 4]) -> [f64; 4] {
        match self {
            Self::Xyxy => b,
            Self::Xywh => [b[0], b[1], b[0] + b[2], b[1] + b[3]],
            Self::Cxcywh => [
                b[0] - b[2] / 2.0,
                b[1] - b[3] / 2.0,
                b[0] + b[2] / 2.0,
                b[1] + b[3] / 2.0,
            ],
        }
    }

    /// An XYXY box in this format.
    pub fn from_xyxy(self, b: [f64; 4]) -> [f64; 4] {
        match self {
            Self::Xyxy => b,
            Self::Xywh => [b[0], b[1], b[2] - b[0], b[3] - b[1]],
            Self::Cxcywh => [(b[0] + b[2]) / 2.0, (b[1] + b[3]) / 2.0, b[2] - b[0], b[3] - b[1]],
        }
    }
}

impl std::fmt::Display for BoxFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The most instances one image may carry (COCO's most is 93, LVIS's
/// under 800): a bound on what a dataset can make a worker allocate.
pub const MAX_INSTANCES: usize = 4096;

/// The most keypoints one instance may carry (COCO's person has 17,
/// COCO-WholeBody 133).
pub const MAX_KEYPOINTS: usize = 512;

/// Why targets were refused: each names the instance and what is wrong.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TargetError {
    #[error("unknown box format {0:?} (expected XYXY, XYWH or CXCYWH)")]
    Format(String),
    #[error("box {index} {values:?}: {why}")]
    Box {
        index: usize,
        values: [f64; 4],
        why: &'static str,
    },
    #[error("keypoint {point} of instance {index}: {why}")]
    Keypoint {
        index: usize,
        point: usize,
        why: &'static str,
    },
    #[error("{what} has {got} values for {boxes} boxes")]
    Length {
        what: &'static str,
        got: usize,
        boxes: usize,
    },
    #[error("{got} {what}, over the limit of {limit}")]
    TooMany {
        what: &'static str,
        got: usize,
        limit: usize,
    },
    #[error("flip_idx {0:?} is not a permutation of the keypoints that is its own inverse")]
    FlipIndex(Vec<usize>),
}

/// One image's instances on a canvas of `canvas` (width, height).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Targets {
    /// The canvas the coordinates are on: the image's size after the steps
    /// followed so far.
    pub canvas: (u32, u32),
    /// XYXY, in pixels of the canvas.
    pub boxes: Vec<[f64; 4]>,
    /// The format the boxes are delivered in.
    pub format: BoxFormat,
    /// One per box.
    pub labels: Vec<i64>,
    /// One per box, or none.
    pub iscrowd: Vec<bool>,
    /// One per box, or none: the dataset's area (a mask's, for COCO),
    /// which geometry does not change, as torchvision leaves it.
    pub area: Vec<f64>,
    /// `per_instance` points per box, each (x, y, visibility), instance
    /// after instance.
    pub keypoints: Vec<[f64; 3]>,
    pub per_instance: usize,
    /// Which keypoint a horizontal flip turns each into (left and right
    /// swap: Ultralytics' `flip_idx`); none keeps them as plain points.
    pub flip_idx: Vec<usize>,
}

impl Targets {
    /// Targets of `canvas` from boxes in `format`, checked: each box
    /// finite, of non-negative size and inside the canvas (a box outside
    /// its image is bad data, not something to clamp quietly).
    pub fn new(
        canvas: (u32, u32),
        format: BoxFormat,
        boxes: &[[f64; 4]],
        labels: Vec<i64>,
    ) -> Result<Self, TargetError> {
        if boxes.len() > MAX_INSTANCES {
            return Err(TargetError::TooMany {
                what: "boxes",
                got: boxes.len(),
                limit: MAX_INSTANCES,
            });
        }
        if labels.len() != boxes.len() {
            return Err(TargetError::Length {
                what: "labels",
                got: labels.len(),
                boxes: boxes.len(),
            });
        }
        let (w, h) = (f64::from(canvas.0), f64::from(canvas.1));
        let mut xyxy = Vec::with_capacity(boxes.len());
        for (index, &b) in boxes.iter().enumerate() {
            let bad = |why| TargetError::Box { index, values: b, why };
            if !b.iter().all(|v| v.is_finite()) {
                return Err(bad("not a finite number"));
            }
            let x = format.to_xyxy(b);
            if x[2] < x[0] || x[3] < x[1] {
                return Err(bad("negative width or height"));
            }
            if x[0] < 0.0 || x[1] < 0.0 || x[2] > w || x[3] > h {
                return Err(bad("reaches outside the image"));
            }
            xyxy.push(x);
        }
        Ok(Self {
            canvas,
            boxes: xyxy,
            format,
            labels,
            ..Self::default()
        })
    }

    /// Adds `per_instance` keypoints per box, (x, y, visibility) each,
    /// instance after instance, with the flip index (empty for none).
    pub fn with_keypoints(
        mut self,
        per_instance: usize,
        points: Vec<[f64; 3]>,
        flip_idx: Vec<usize>,
    ) -> Result<Self, TargetError> {
        if per_instance > MAX_KEYPOINTS {
            return Err(TargetError::TooMany {
                what: "keypoints per instance",
                got: per_instance,
                limit: MAX_KEYPOINTS,
            });
        }
        if points.len() != per_instance * self.boxes.len() {
            return Err(TargetError::Length {
                what: "keypoints",
                got: points.len(),
                boxes: self.boxes.len(),
            });
        }
        for (i, p) in points.iter().enumerate() {
            if !p.iter().all(|v| v.is_finite()) {
                return Err(TargetError::Keypoint {
                    index: i / per_instance.max(1),
                    point: i % per_instance.max(1),
                    why: "not a finite number",
                });
            }
        }
        let involution = flip_idx.len() == per_instance
            && flip_idx
                .iter()
                .enumerate()
                .all(|(i, &j)| j < per_instance && flip_idx[j] == i);
        if !flip_idx.is_empty() && !involution {
            return Err(TargetError::FlipIndex(flip_idx));
        }
        self.per_instance = per_instance;
        self.keypoints = points;
        self.flip_idx = flip_idx;
        Ok(self)
    }

    /// Follows `steps` (recorded with the pixels' steps) in order.
    pub fn follow(&mut self, steps: &[TargetStep]) {
        for s in steps {
            s.apply(self);
        }
    }

    /// The boxes in their delivery format.
    pub fn boxes_out(&self) -> Vec<[f64; 4]> {
        self.boxes.iter().map(|&b| self.format.from_xyxy(b)).collect()
    }

    /// Keeps the instances where `keep` is true, in every per-instance
    /// list.
    pub(crate) fn retain(&mut self, keep: &[bool]) {
        let pick = |i: usize| keep[i];
        let mut i = 0;
        self.boxes.retain(|_| (pick(i), i += 1).0);
        let mut i = 0;
        self.labels.retain(|_| (pick(i), i += 1).0);
        if !self.iscrowd.is_empty() {
            let mut i = 0;
            self.iscrowd.retain(|_| (pick(i), i += 1).0);
        }
        if !self.area.is_empty() {
            let mut i = 0;
            self.area.retain(|_| (pick(i), i += 1).0);
        }
        if self.per_instance > 0 {
            let k = self.per_instance;
            let mut i = 0;
            self.keypoints.retain(|_| (pick(i / k), i += 1).0);
        }
    }
}

#[cfg(test)]
mod tests;
