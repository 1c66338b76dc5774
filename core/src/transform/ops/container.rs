//! Containers: Compose, RandomApply, RandomChoice, RandomOrder. Each
//! child draws from its container's generator forked by the child's index.

use serde::{Deserialize, Serialize};

use super::{Op, OpImpl};
use crate::params::{Bounds, Cx, ResolveError, Walk};
use crate::rng::SampleRng;
use crate::transform::args::check_p;
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, optional, required};

/// Resolves `op`, the `index`th child of a container whose generator was
/// `base` when it started, with a generator of its own.
fn child(cx: &mut Cx<'_>, base: &SampleRng, index: usize, op: &Op) -> Result<(), ResolveError> {
    let parent = cx.op;
    let saved = std::mem::replace(&mut cx.rng, base.fork(index as u64));
    let result = op.resolve(cx);
    cx.rng = saved;
    cx.op = parent;
    result
}

/// Checks children, naming the first bad one by position.
fn validate_children(ops: &[Op]) -> Result<(), String> {
    if ops.is_empty() {
        return Err("transforms must not be empty".to_owned());
    }
    for (i, op) in ops.iter().enumerate() {
        if op.imp().is_output() {
            return Err(format!(
                "transforms[{i}] ({}) converts the output and must come last in the top-level pipeline",
                op.name()
            ));
        }
        op.validate()
            .map_err(|e| format!("transforms[{i}] ({}): {e}", op.name()))?;
    }
    Ok(())
}

fn seq_bounds(ops: &[Op], mut b: Bounds) -> Bounds {
    for op in ops {
        b = op.bounds(b);
    }
    b
}

fn seq_walk(ops: &[Op], mut b: Bounds, walk: &mut Walk) -> Bounds {
    for op in ops {
        b = op.walk(b, walk);
    }
    b
}

fn seq_resolve(ops: &[Op], cx: &mut Cx<'_>) -> Result<(), ResolveError> {
    let base = cx.rng.clone();
    for (i, op) in ops.iter().enumerate() {
        child(cx, &base, i, op)?;
    }
    Ok(())
}

/// Its transforms in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compose {
    pub transforms: Vec<Op>,
}

impl Described for Compose {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Its transforms, in order.",
        origin: Origin::Torchvision,
        role: Role::Container,
        args: &[required("transforms", ArgKind::Transforms, "the transforms to apply")],
    };
}

impl OpImpl for Compose {
    fn validate(&self) -> Result<(), String> {
        validate_children(&self.transforms)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        seq_bounds(&self.transforms, b)
    }

    fn walk(&self, _name: &'static str, b: Bounds, walk: &mut Walk) -> Bounds {
        seq_walk(&self.transforms, b, walk)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        seq_resolve(&self.transforms, cx)
    }
}

/// Its transforms, in order, with probability `p`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomApply {
    pub transforms: Vec<Op>,
    pub p: f64,
}

impl Described for RandomApply {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Its transforms, in order, with probability p.",
        origin: Origin::Torchvision,
        role: Role::Container,
        args: &[
            required("transforms", ArgKind::Transforms, "the transforms to apply together"),
            optional("p", ArgKind::Probability, "0.5", "probability of applying them"),
        ],
    };
}

impl OpImpl for RandomApply {
    fn validate(&self) -> Result<(), String> {
        check_p(self.p)?;
        validate_children(&self.transforms)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b.union(seq_bounds(&self.transforms, b))
    }

    fn walk(&self, _name: &'static str, b: Bounds, walk: &mut Walk) -> Bounds {
        b.union(seq_walk(&self.transforms, b, walk))
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let base = cx.rng.clone();
        if cx.rng.bernoulli(self.p) {
            for (i, op) in self.transforms.iter().enumerate() {
                child(cx, &base, i, op)?;
            }
        }
        Ok(())
    }
}

/// One of its transforms, chosen with weights `p` (uniform by default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomChoice {
    pub transforms: Vec<Op>,
    pub p: Option<Vec<f64>>,
}

impl Described for RandomChoice {
    const SCHEMA: OpSchema = OpSchema {
        doc: "One of its transforms, picked with weights p (equal when None). Of MixUp / CutMix, a batch transform.",
        origin: Origin::Torchvision,
        role: Role::Container,
        args: &[
            required("transforms", ArgKind::Transforms, "the transforms to choose from"),
            optional(
                "p",
                ArgKind::Weights,
                "null",
                "one weight per transform (need not sum to 1)",
            ),
        ],
    };
}

impl OpImpl for RandomChoice {
    fn validate(&self) -> Result<(), String> {
        if let Some(p) = &self.p {
            if p.len() != self.transforms.len() {
                return Err(format!(
                    "p has {} weights for {} transforms",
                    p.len(),
                    self.transforms.len()
                ));
            }
            if !p.iter().all(|w| w.is_finite() && *w >= 0.0) || p.iter().sum::<f64>() <= 0.0 {
                return Err(format!("p {p:?} must be non-negative weights with a positive sum"));
            }
        }
        validate_children(&self.transforms)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        let mut out: Option<Bounds> = None;
        for op in &self.transforms {
            let o = op.bounds(b);
            out = Some(out.map_or(o, |u| u.union(o)));
        }
        out.unwrap_or(b)
    }

    fn walk(&self, _name: &'static str, b: Bounds, walk: &mut Walk) -> Bounds {
        let mut out: Option<Bounds> = None;
        for op in &self.transforms {
            let o = op.walk(b, walk);
            out = Some(out.map_or(o, |u| u.union(o)));
        }
        out.unwrap_or(b)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let base = cx.rng.clone();
        let n = self.transforms.len();
        let weights = self.p.clone().unwrap_or_else(|| vec![1.0; n]);
        let total: f64 = weights.iter().sum();
        let mut u = cx.rng.next_f64() * total;
        let mut chosen = n - 1;
        for (i, w) in weights.iter().enumerate() {
            if u < *w {
                chosen = i;
                break;
            }
            u -= w;
        }
        child(cx, &base, chosen, &self.transforms[chosen])
    }
}

/// All of its transforms, in a random order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomOrder {
    pub transforms: Vec<Op>,
}

impl Described for RandomOrder {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Its transforms, in a random order.",
        origin: Origin::Torchvision,
        role: Role::Container,
        args: &[required("transforms", ArgKind::Transforms, "the transforms to apply")],
    };
}

impl RandomOrder {
    /// Any order: each round may run any child.
    fn rounds(&self, mut b: Bounds, mut each: impl FnMut(&Op, Bounds) -> Bounds) -> Bounds {
        for _ in 0..self.transforms.len() {
            let mut next = b;
            for op in &self.transforms {
                next = next.union(each(op, b));
            }
            b = next;
        }
        b
    }
}

impl OpImpl for RandomOrder {
    fn validate(&self) -> Result<(), String> {
        validate_children(&self.transforms)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        if self.transforms.iter().all(|op| op.bounds(b) == b) {
            return b;
        }
        self.rounds(b, |op, b| op.bounds(b))
    }

    fn walk(&self, _name: &'static str, b: Bounds, walk: &mut Walk) -> Bounds {
        self.rounds(b, |op, b| op.walk(b, walk))
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let base = cx.rng.clone();
        let mut order: Vec<usize> = (0..self.transforms.len()).collect();
        for i in (1..order.len()).rev() {
            let j = cx.rng.int_inclusive(0, i as i64) as usize;
            order.swap(i, j);
        }
        for i in order {
            child(cx, &base, i, &self.transforms[i])?;
        }
        Ok(())
    }
}
