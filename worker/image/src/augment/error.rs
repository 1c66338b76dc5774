//! [`AugmentError`], what a step that could not run returns: below the
//! executor (`mod.rs`) and the steps that fail (`geometry`).

/// Why a step could not run (only on inconsistent input; never expected).
#[derive(Debug, thiserror::Error)]
#[error("augment failed: {0}")]
pub struct AugmentError(pub(super) String);
