//! [`Targets`] and [`BoxFormat`]: one image's instances, read from a
//! dataset's JSON or built, checked against their image.

use bytes::Bytes;

use super::masks::Outline;

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
    #[error("segmentation of instance {index}: {why}")]
    Outline { index: usize, why: String },
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
    /// One per box, or none: each instance's shape on the image as the
    /// dataset gives it, read when the field asks for masks
    /// ([`crate::FieldKind::TargetsWithMasks`]) and drawn by the worker.
    pub outlines: Vec<Outline>,
    /// The drawn masks, once the worker has drawn the outlines through the
    /// image's geometry: one plane of `canvas` per box, row-major, 1 inside
    /// the instance and 0 outside.
    pub masks: Option<Bytes>,
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
        let mut t = Self {
            canvas: (0, 0),
            boxes: read_boxes(format, boxes)?,
            format,
            labels,
            ..Self::default()
        };
        t.place(canvas)?;
        Ok(t)
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

    /// Targets as a dataset stores them for one image, in JSON (what
    /// `stoker pack` writes, and a WebDataset `.json` may hold):
    /// `{"boxes": [[x, y, w, h], ...], "format": "XYWH", "labels": [3, 1],
    /// "iscrowd": [0, 0], "area": [...], "keypoints": [[[x, y, v], ...],
    /// ...], "flip_idx": [...]}`; only `boxes` is required (`format`
    /// defaults to XYXY, labels to 0); other keys are ignored. The result
    /// is read, not yet placed: [`Targets::place`] checks it against its
    /// image. Errors name the key and the instance.
    ///
    /// With `masks`, each instance's `segmentation` (COCO's: polygons or an
    /// RLE, as `stoker pack` keeps it) is read too, and required.
    pub fn from_json(bytes: &[u8], masks: bool) -> Result<Targets, String> {
        #[derive(serde::Deserialize)]
        struct Doc {
            boxes: Vec<[f64; 4]>,
            #[serde(default)]
            format: Option<String>,
            #[serde(default)]
            labels: Option<Vec<i64>>,
            #[serde(default)]
            iscrowd: Option<Vec<u8>>,
            #[serde(default)]
            area: Option<Vec<f64>>,
            #[serde(default)]
            keypoints: Option<Vec<Vec<[f64; 3]>>>,
            #[serde(default)]
            flip_idx: Option<Vec<usize>>,
            #[serde(default)]
            segmentation: Option<Vec<serde_json::Value>>,
        }
        let doc: Doc = serde_json::from_slice(bytes).map_err(|e| format!("not targets JSON: {e}"))?;
        let n = doc.boxes.len();
        if n > MAX_INSTANCES {
            return Err(TargetError::TooMany {
                what: "boxes",
                got: n,
                limit: MAX_INSTANCES,
            }
            .to_string());
        }
        let format = match &doc.format {
            Some(f) => BoxFormat::parse(f).map_err(|e| e.to_string())?,
            None => BoxFormat::Xyxy,
        };
        let per_box = |what: &'static str, got: usize| {
            if got == n {
                Ok(())
            } else {
                Err(TargetError::Length { what, got, boxes: n }.to_string())
            }
        };
        let labels = doc.labels.unwrap_or_else(|| vec![0; n]);
        per_box("labels", labels.len())?;
        let iscrowd: Vec<bool> = doc.iscrowd.unwrap_or_default().into_iter().map(|c| c != 0).collect();
        if !iscrowd.is_empty() {
            per_box("iscrowd", iscrowd.len())?;
        }
        let area = doc.area.unwrap_or_default();
        if !area.is_empty() {
            per_box("area", area.len())?;
        }
        let boxes = read_boxes(format, &doc.boxes).map_err(|e| e.to_string())?;
        let mut t = Targets {
            canvas: (0, 0),
            boxes,
            format,
            labels,
            iscrowd,
            area,
            ..Targets::default()
        };
        if let Some(points) = doc.keypoints {
            per_box("keypoints", points.len())?;
            let k = points.first().map_or(0, Vec::len);
            if let Some(i) = points.iter().position(|p| p.len() != k) {
                return Err(format!(
                    "keypoints: instance {i} has {} points, instance 0 has {k}",
                    points[i].len()
                ));
            }
            t = t
                .with_keypoints(k, points.concat(), doc.flip_idx.unwrap_or_default())
                .map_err(|e| e.to_string())?;
        }
        if masks {
            let shapes = doc
                .segmentation
                .ok_or("no segmentation: masks need each instance's (COCO's polygons or RLE)")?;
            per_box("segmentation", shapes.len())?;
            t.outlines = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| Outline::from_json(s).map_err(|why| format!("segmentation of instance {i}: {why}")))
                .collect::<Result<_, _>>()?;
        }
        Ok(t)
    }

    /// Places targets read by [`Targets::from_json`] on their image of
    /// `canvas`: every box must lie inside it.
    pub fn place(&mut self, canvas: (u32, u32)) -> Result<(), TargetError> {
        let (w, h) = (f64::from(canvas.0), f64::from(canvas.1));
        for (index, &b) in self.boxes.iter().enumerate() {
            if b[0] < 0.0 || b[1] < 0.0 || b[2] > w || b[3] > h {
                return Err(TargetError::Box {
                    index,
                    values: self.format.from_xyxy(b),
                    why: "reaches outside the image",
                });
            }
        }
        for (index, o) in self.outlines.iter().enumerate() {
            o.check(canvas).map_err(|why| TargetError::Outline { index, why })?;
        }
        self.canvas = canvas;
        Ok(())
    }

    /// Bytes it holds, for chunk sizes.
    pub fn byte_len(&self) -> usize {
        self.boxes.len() * (32 + 8 + 1 + 8) + self.keypoints.len() * 24 + self.masks.as_ref().map_or(0, Bytes::len)
    }

    /// The bytes its masks take once drawn on `canvas`: a plane per box.
    pub fn mask_bytes(&self, canvas: (u32, u32)) -> u64 {
        self.outlines.len() as u64 * u64::from(canvas.0) * u64::from(canvas.1)
    }

    /// As JSON (`stoker stream --fields-out`): the canvas, the boxes in
    /// their format, and the per-instance lists.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "canvas": [self.canvas.0, self.canvas.1],
            "format": self.format.name(),
            "boxes": self.boxes_out(),
            "labels": self.labels,
            "iscrowd": self.iscrowd,
            "area": self.area,
            "keypoints": self.keypoints.chunks(self.per_instance.max(1)).collect::<Vec<_>>(),
            "masks": self.masks_json(),
        })
    }

    /// The drawn masks as COCO's uncompressed RLEs, one per box (none
    /// before they are drawn).
    fn masks_json(&self) -> Vec<serde_json::Value> {
        let Some(masks) = &self.masks else { return Vec::new() };
        let plane = self.canvas.0 as usize * self.canvas.1 as usize;
        masks
            .chunks(plane.max(1))
            .take(self.boxes.len())
            .map(|m| {
                serde_json::json!({
                    "size": [self.canvas.1, self.canvas.0],
                    "counts": Outline::runs_of(m, self.canvas),
                })
            })
            .collect()
    }

    /// As a dataset stores them for one image: the JSON
    /// [`Targets::from_json`] reads (what `stoker pack` writes), with the
    /// boxes in their format and only the lists the targets have
    /// (`iscrowd` as 0 and 1, `keypoints` per instance, `flip_idx`; an
    /// image without instances has no keypoints to pair). No canvas: the
    /// image is the canvas.
    pub fn to_dataset_json(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut doc = serde_json::Map::new();
        doc.insert("boxes".into(), serde_json::json!(self.boxes_out()));
        doc.insert("format".into(), self.format.name().into());
        doc.insert("labels".into(), serde_json::json!(self.labels));
        if !self.iscrowd.is_empty() {
            let crowd: Vec<u8> = self.iscrowd.iter().map(|&c| u8::from(c)).collect();
            doc.insert("iscrowd".into(), serde_json::json!(crowd));
        }
        if !self.area.is_empty() {
            doc.insert("area".into(), serde_json::json!(self.area));
        }
        if self.per_instance > 0 && !self.boxes.is_empty() {
            let points: Vec<&[[f64; 3]]> = self.keypoints.chunks(self.per_instance).collect();
            doc.insert("keypoints".into(), serde_json::json!(points));
            if !self.flip_idx.is_empty() {
                doc.insert("flip_idx".into(), serde_json::json!(self.flip_idx));
            }
        }
        if !self.outlines.is_empty() {
            let shapes: Vec<serde_json::Value> = self.outlines.iter().map(Outline::to_json).collect();
            doc.insert("segmentation".into(), shapes.into());
        }
        doc
    }

    /// The boxes in their delivery format.
    pub fn boxes_out(&self) -> Vec<[f64; 4]> {
        self.boxes.iter().map(|&b| self.format.from_xyxy(b)).collect()
    }

    /// Keeps the instances where `keep` is true, in every per-instance
    /// list.
    pub(crate) fn retain(&mut self, keep: &[bool]) {
        keep_rows(&mut self.boxes, keep, 1);
        keep_rows(&mut self.labels, keep, 1);
        keep_rows(&mut self.iscrowd, keep, 1);
        keep_rows(&mut self.area, keep, 1);
        keep_rows(&mut self.keypoints, keep, self.per_instance);
        keep_rows(&mut self.outlines, keep, 1);
        if let Some(masks) = &self.masks {
            let plane = (self.canvas.0 as usize * self.canvas.1 as usize).max(1);
            let mut kept = masks.to_vec();
            keep_rows(&mut kept, keep, plane);
            self.masks = Some(Bytes::from(kept));
        }
    }
}

/// Keeps the rows of `per` values (one instance's) of `v` where `keep` is
/// true; an empty list (a value the dataset did not give) stays empty.
fn keep_rows<T>(v: &mut Vec<T>, keep: &[bool], per: usize) {
    let per = per.max(1);
    let mut i = 0;
    v.retain(|_| {
        let kept = keep[i / per];
        i += 1;
        kept
    });
}

/// Boxes in `format` as XYXY, each finite and of non-negative size.
fn read_boxes(format: BoxFormat, boxes: &[[f64; 4]]) -> Result<Vec<[f64; 4]>, TargetError> {
    boxes
        .iter()
        .enumerate()
        .map(|(index, &b)| {
            let bad = |why| TargetError::Box { index, values: b, why };
            if !b.iter().all(|v| v.is_finite()) {
                return Err(bad("not a finite number"));
            }
            let x = format.to_xyxy(b);
            if x[2] < x[0] || x[3] < x[1] {
                return Err(bad("negative width or height"));
            }
            Ok(x)
        })
        .collect()
}
