//! RandomHorizontalFlip, RandomVerticalFlip.

use serde::{Deserialize, Serialize};

use super::OpImpl;
use crate::params::{Bounds, Cx, ResolveError, Step};
use crate::transform::args::{check_p, half};

/// Mirror left-right with probability `p`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomHorizontalFlip {
    #[serde(default = "half")]
    pub p: f64,
}

/// Mirror top-bottom with probability `p`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomVerticalFlip {
    #[serde(default = "half")]
    pub p: f64,
}

impl Default for RandomHorizontalFlip {
    fn default() -> Self {
        Self { p: 0.5 }
    }
}

impl Default for RandomVerticalFlip {
    fn default() -> Self {
        Self { p: 0.5 }
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
