//! What every op implements: validation, its size rule, its memory
//! footprint and its random draws ([`OpImpl`]).

use crate::params::{Bounds, Cx, ResolveError, Walk};

/// What every op implements.
pub trait OpImpl {
    /// Checks the arguments. The reason names the argument and its value.
    fn validate(&self) -> Result<(), String>;

    /// The sizes the op can output for inputs within `b`.
    fn bounds(&self, b: Bounds) -> Bounds;

    /// Extra bytes the op holds while it runs, besides its input and output
    /// images (of sizes within `inp` and `out`): a resize's pass between
    /// its two directions and its weights, a blur's float copy.
    fn scratch(&self, _inp: Bounds, _out: Bounds) -> u64 {
        0
    }

    /// Walks the op for [`crate::footprint`]: its sizes, and the most it
    /// holds. Containers walk their children.
    fn walk(&self, name: &'static str, b: Bounds, walk: &mut Walk) -> Bounds {
        let out = self.bounds(b);
        walk.step(name, b, out, self.scratch(b, out));
        out
    }

    /// Draws this sample's parameters from `cx.rng` and appends the steps
    /// for an image of `cx.w` x `cx.h`.
    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError>;

    /// Whether the op marks the end of the pixel pipeline (ToImage, ToDtype,
    /// Normalize): only RandomErasing may follow one.
    fn is_output(&self) -> bool {
        false
    }
}
