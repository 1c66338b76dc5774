//! Pad.

use serde::{Deserialize, Serialize};

use super::op_impl::OpImpl;
use crate::params::{Bounds, Cx, ResolveError, Step};
use crate::transform::args::{Fill, Padding, PaddingMode};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, optional, required};

/// Pads every side (torchvision's `Pad`): `padding` is an int,
/// `[left/right, top/bottom]` or `[left, top, right, bottom]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pad {
    pub padding: Padding,
    pub fill: Fill,
    pub padding_mode: PaddingMode,
}

impl Described for Pad {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Padded on each side.",
        origin: Origin::Torchvision,
        role: Role::Geometry,
        args: &[
            required("padding", ArgKind::Padding, "pixels added on each side"),
            optional("fill", ArgKind::Fill, "0", "the constant padding's colour"),
            optional(
                "padding_mode",
                ArgKind::PaddingMode,
                "\"constant\"",
                "how padding is filled",
            ),
        ],
    };
}

impl OpImpl for Pad {
    fn validate(&self) -> Result<(), String> {
        self.padding.check()?;
        self.fill.check()
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b.padded(self.padding.ltrb())
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let ltrb = self.padding.ltrb();
        if ltrb == [0; 4] {
            return Ok(());
        }
        cx.push(Step::Pad {
            ltrb,
            mode: self.padding_mode,
            fill: self.fill.rgb(),
        });
        Ok(())
    }
}
