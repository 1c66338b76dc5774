//! GaussianBlur.

use serde::{Deserialize, Serialize};

use super::op_impl::OpImpl;
use crate::params::{Bounds, Cx, ResolveError, Step};
use crate::transform::args::{Range, check_range};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, construct, optional, required};

/// torchvision's `kernel_size`: an int or `[kx, ky]`, odd.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum KernelSize {
    Square(u32),
    Sides(Vec<u32>),
}

impl KernelSize {
    fn xy(&self) -> (u32, u32) {
        match self {
            Self::Square(k) => (*k, *k),
            Self::Sides(v) => match v[..] {
                [k] => (k, k),
                [x, y] => (x, y),
                _ => (0, 0),
            },
        }
    }
}

/// A Gaussian blur, sigma uniform in `sigma` (torchvision's
/// `GaussianBlur`: reflect border, the result rounded).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GaussianBlur {
    pub kernel_size: KernelSize,
    pub sigma: Range,
}

impl Described for GaussianBlur {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Blurred by a Gaussian of kernel_size, sigma uniform in sigma.",
        origin: Origin::Torchvision,
        role: Role::Colour,
        args: &[
            required("kernel_size", ArgKind::Kernel, "odd, positive kernel size"),
            optional(
                "sigma",
                ArgKind::Range,
                "[0.1, 2.0]",
                "range of the standard deviation; a number is fixed",
            ),
        ],
    };
}

impl GaussianBlur {
    pub fn new(kernel_size: u32) -> Self {
        construct(serde_json::json!({ "kernel_size": kernel_size }))
    }
}

impl OpImpl for GaussianBlur {
    fn validate(&self) -> Result<(), String> {
        let (x, y) = self.kernel_size.xy();
        for k in [x, y] {
            if k % 2 == 0 || k > 101 {
                return Err(format!("kernel_size {k} must be odd, positive and at most 101"));
            }
        }
        let (a, b) = self.sigma.point();
        if a <= 0.0 {
            return Err(format!("sigma ({a}, {b}) must be positive"));
        }
        check_range("sigma", (a, b), 0.0, 100.0)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn scratch(&self, inp: Bounds, _out: Bounds) -> u64 {
        // The float pass between the two directions.
        inp.pixels().saturating_mul(12)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let (a, b) = self.sigma.point();
        let sigma = cx.rng.uniform(a, b) as f32;
        cx.push(Step::Blur {
            kernel: self.kernel_size.xy(),
            sigma,
        });
        Ok(())
    }
}
