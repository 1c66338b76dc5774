//! The events lanes send the supervisor, in the order they received them:
//! samples, and the completion of plan items.

use crate::sample::Sample;

/// What lanes send the assembler, in the order they received it.
#[derive(Debug)]
pub(crate) enum Event {
    Sample(Sample),
    /// Plan item `item` is complete: `samples` of its samples were
    /// accepted in this run (some may still be on their way).
    ItemDone {
        item: u32,
        samples: u64,
    },
}
