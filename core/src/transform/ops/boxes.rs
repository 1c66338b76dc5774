//! ClampBoundingBoxes, SanitizeBoundingBoxes, ConvertBoundingBoxFormat:
//! ops on a sample's boxes alone ([`crate::targets`]), which leave its
//! pixels as they are. They may follow the output conversion, as in
//! torchvision's detection recipes (`ToDtype`, then
//! `SanitizeBoundingBoxes`).

use serde::{Deserialize, Serialize};

use super::op_impl::OpImpl;
use crate::params::{Bounds, Cx, ResolveError};
use crate::targets::{BoxFormat, TargetStep};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, construct, optional, required};

/// Clamps every box to the canvas (torchvision's `ClampBoundingBoxes`;
/// its soft and hard modes are the same for upright boxes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClampBoundingBoxes {
    pub clamping_mode: String,
}

impl Described for ClampBoundingBoxes {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Boxes clamped to the image.",
        origin: Origin::Torchvision,
        role: Role::Boxes,
        args: &[optional(
            "clamping_mode",
            ArgKind::Str,
            "\"auto\"",
            "soft, hard or auto: the same for upright boxes",
        )],
    };
}

impl Default for ClampBoundingBoxes {
    fn default() -> Self {
        construct(serde_json::json!({}))
    }
}

impl OpImpl for ClampBoundingBoxes {
    fn validate(&self) -> Result<(), String> {
        match self.clamping_mode.as_str() {
            "soft" | "hard" | "auto" => Ok(()),
            other => Err(format!("clamping_mode {other:?} is not one of soft, hard, auto")),
        }
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        cx.push_target(TargetStep::Clamp);
        Ok(())
    }
}

/// Drops boxes under `min_size` on a side or `min_area`, or outside the
/// image, with their labels, keypoints and every other per-instance value
/// (torchvision's `SanitizeBoundingBoxes`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SanitizeBoundingBoxes {
    pub min_size: f64,
    pub min_area: f64,
    pub labels_getter: String,
}

impl Described for SanitizeBoundingBoxes {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Degenerate boxes dropped, with their labels and other per-instance values.",
        origin: Origin::Torchvision,
        role: Role::Boxes,
        args: &[
            optional("min_size", ArgKind::Number, "1.0", "smallest width and height kept"),
            optional("min_area", ArgKind::Number, "1.0", "smallest area kept"),
            optional(
                "labels_getter",
                ArgKind::Str,
                "\"default\"",
                "default: labels and every other per-instance value go with their boxes",
            ),
        ],
    };
}

impl Default for SanitizeBoundingBoxes {
    fn default() -> Self {
        construct(serde_json::json!({}))
    }
}

impl OpImpl for SanitizeBoundingBoxes {
    fn validate(&self) -> Result<(), String> {
        for (name, v) in [("min_size", self.min_size), ("min_area", self.min_area)] {
            if !v.is_finite() || v < 1.0 {
                // torchvision refuses a min_size under 1 too.
                return Err(format!("{name} must be a finite number of at least 1, got {v}"));
            }
        }
        if self.labels_getter != "default" {
            return Err(format!(
                "labels_getter {:?}: only \"default\" is supported (labels and every other per-instance value \
                 are kept or dropped with their boxes)",
                self.labels_getter
            ));
        }
        Ok(())
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        cx.push_target(TargetStep::Sanitize {
            min_size: self.min_size,
            min_area: self.min_area,
        });
        Ok(())
    }
}

/// The format the boxes are delivered in (torchvision's
/// `ConvertBoundingBoxFormat`): XYXY, XYWH or CXCYWH.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConvertBoundingBoxFormat {
    pub format: String,
}

impl Described for ConvertBoundingBoxFormat {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Boxes delivered in another format.",
        origin: Origin::Torchvision,
        role: Role::Boxes,
        args: &[required("format", ArgKind::BoxFormat, "XYXY, XYWH or CXCYWH")],
    };
}

impl OpImpl for ConvertBoundingBoxFormat {
    fn validate(&self) -> Result<(), String> {
        BoxFormat::parse(&self.format).map(drop).map_err(|e| e.to_string())
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let format = BoxFormat::parse(&self.format).map_err(|e| cx.err(e.to_string()))?;
        cx.push_target(TargetStep::Format(format));
        Ok(())
    }
}
