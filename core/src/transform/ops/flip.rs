//! RandomHorizontalFlip, RandomVerticalFlip.

use serde::{Deserialize, Serialize};

use super::op_impl::OpImpl;
use crate::params::{Bounds, Cx, ResolveError, Step};
use crate::transform::args::check_p;
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, construct, optional};

/// Mirror left-right with probability `p`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomHorizontalFlip {
    pub p: f64,
}

impl Described for RandomHorizontalFlip {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Mirrored left-right with probability p.",
        origin: Origin::Torchvision,
        role: Role::Geometry,
        args: &[optional("p", ArgKind::Probability, "0.5", "probability of the flip")],
    };
}

/// Mirror top-bottom with probability `p`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomVerticalFlip {
    pub p: f64,
}

impl Described for RandomVerticalFlip {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Mirrored top-bottom with probability p.",
        origin: Origin::Torchvision,
        role: Role::Geometry,
        args: &[optional("p", ArgKind::Probability, "0.5", "probability of the flip")],
    };
}

impl Default for RandomHorizontalFlip {
    fn default() -> Self {
        construct(serde_json::json!({}))
    }
}

impl Default for RandomVerticalFlip {
    fn default() -> Self {
        construct(serde_json::json!({}))
    }
}

impl OpImpl for RandomHorizontalFlip {
    fn validate(&self) -> Result<(), String> {
        check_p(self.p)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        if cx.rng.bernoulli(self.p) {
            cx.push(Step::FlipHorizontal);
        }
        Ok(())
    }
}

impl OpImpl for RandomVerticalFlip {
    fn validate(&self) -> Result<(), String> {
        check_p(self.p)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        if cx.rng.bernoulli(self.p) {
            cx.push(Step::FlipVertical);
        }
        Ok(())
    }
}
