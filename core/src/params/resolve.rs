//! The context of resolving one sample's ops into steps: [`Cx`] (the
//! op's generator, the size so far, the steps so far), the value
//! [`PixelScale`] the pixels are at, and [`ResolveError`], a sample whose
//! draws cannot be carried out.

use super::step::Step;
use crate::rng::SampleRng;
use crate::targets::{TargetStep, Targets};

/// What the pixel values mean at this point of a pipeline, for ops that
/// write values (RandomErasing):
/// torchvision's erasing value means a different colour before and after
/// `ToDtype` and `Normalize`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PixelScale {
    /// uint8, 0..=255 (PIL images, `ToImage`).
    Uint8,
    /// Floats scaled to [0, 1] (`ToDtype(float, scale=True)`).
    Float,
    /// After `Normalize(mean, std)`.
    Normalized { mean: [f64; 3], std: [f64; 3] },
}

impl PixelScale {
    /// The uint8 pixel of channel `c` whose value at this scale is `v`.
    pub fn to_pixel(self, v: f64, c: usize) -> u8 {
        let p = match self {
            Self::Uint8 => v,
            Self::Float => v * 255.0,
            Self::Normalized { mean, std } => (v * std[c] + mean[c]) * 255.0,
        };
        p.round().clamp(0.0, 255.0) as u8
    }

    /// `(scale, offset)` with `pixel = v * scale + offset`.
    pub fn affine(self, c: usize) -> (f32, f32) {
        match self {
            Self::Uint8 => (1.0, 0.0),
            Self::Float => (255.0, 0.0),
            Self::Normalized { mean, std } => ((std[c] * 255.0) as f32, (mean[c] * 255.0) as f32),
        }
    }
}

/// A sample whose draws cannot be carried out (torchvision raises on it):
/// a crop larger than its input without `pad_if_needed`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("transform {op}: {reason}")]
pub struct ResolveError {
    pub op: &'static str,
    pub reason: String,
}

/// The state of resolving one sample: its generator (this op's), the size
/// so far, the steps so far and the pixels' scale.
#[derive(Debug)]
pub struct Cx<'a> {
    pub rng: SampleRng,
    pub w: u32,
    pub h: u32,
    pub steps: &'a mut Vec<Step>,
    pub scale: PixelScale,
    /// The op being resolved, for errors.
    pub op: &'static str,
    /// The targets' steps, recorded with the pixels' when the sample has
    /// boxes or keypoints ([`crate::targets`]); `None` otherwise.
    pub targets: Option<Vec<TargetStep>>,
    /// The first step targets could not follow, with its op.
    pub refused: Option<ResolveError>,
    /// The sample's targets as read, with its image's size, for the ops
    /// that choose by them (`RandomIoUCrop`): placed and moved only when
    /// one asks ([`Cx::current_targets`]), so other samples pay nothing.
    pub initial: Option<(&'a Targets, (u32, u32))>,
}

impl<'a> Cx<'a> {
    /// A context at the start of a sample of `w` x `h`, recording target
    /// steps when `targets`.
    pub fn new(rng: SampleRng, w: u32, h: u32, steps: &'a mut Vec<Step>, targets: bool) -> Self {
        Self {
            rng,
            w,
            h,
            steps,
            scale: PixelScale::Uint8,
            op: "",
            targets: targets.then(Vec::new),
            refused: None,
            initial: None,
        }
    }
}

impl Cx<'_> {
    /// Appends a step, updating the size, and its target steps.
    pub fn push(&mut self, step: Step) {
        if let Some(targets) = &mut self.targets
            && let Err(e) = TargetStep::steps_of(&step, self.w, self.h, targets)
            && self.refused.is_none()
        {
            self.refused = Some(ResolveError {
                op: self.op,
                reason: e.0,
            });
        }
        (self.w, self.h) = step.output_size(self.w, self.h);
        self.steps.push(step);
    }

    /// Appends a step whose targets move as `target` says rather than as
    /// the step's pixels do (a rotation with `expand`).
    pub fn push_with_target(&mut self, step: Step, target: TargetStep) {
        if let Some(targets) = &mut self.targets {
            targets.push(target);
        }
        (self.w, self.h) = step.output_size(self.w, self.h);
        self.steps.push(step);
    }

    /// Appends a step that only moves targets (clamping, sanitizing,
    /// converting the format).
    pub fn push_target(&mut self, target: TargetStep) {
        if let Some(targets) = &mut self.targets {
            targets.push(target);
        }
    }

    /// The sample's targets as the steps so far have moved them: `None`
    /// when they are not followed, or were not given (an annotation that
    /// does not fit its image: the sample is skipped for it).
    pub fn current_targets(&self) -> Option<Targets> {
        let (read, canvas) = self.initial?;
        let mut t = read.clone();
        t.place(canvas).ok()?;
        t.follow(self.targets.as_deref()?);
        Some(t)
    }

    pub fn err(&self, reason: impl Into<String>) -> ResolveError {
        ResolveError {
            op: self.op,
            reason: reason.into(),
        }
    }
}
