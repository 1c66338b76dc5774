//! The order in which received samples go into batches.
//!
//! In arrival order, samples pass straight through. In deterministic order,
//! each plan item's samples are held until the item is complete and every
//! item before it has been passed on, then released sorted by their
//! position in the shard: the rank's sample sequence is then a function of
//! the plan alone, whatever the number or speed of the workers.
//!
//! Either way the sequencer says when an item is complete: once its
//! `ItemDone` event arrived and all the samples it counts have passed. A
//! batch that carries an item's completion holds, or follows, every sample
//! of it; the client's resumable state is built on that. The count comes
//! from the lane (sent after `Ledger::complete`), so an abandoned
//! attempt's accepted samples arriving after the new attempt's `ItemDone`
//! still count.

use crate::event::Event;
use crate::sample::Sample;

/// What the assembler receives.
#[derive(Debug)]
pub(crate) enum Ordered {
    Sample(Sample),
    /// Every sample of this plan item has been passed on.
    ItemComplete(u32),
}

#[derive(Debug, Default)]
struct ItemSlot {
    /// Samples seen in this run.
    seen: u64,
    /// Samples accepted for the item, once its `ItemDone` arrived.
    expected: Option<u64>,
    /// Held samples (deterministic order only).
    held: Vec<Sample>,
    /// Complete and passed on (or delivered before a resume).
    released: bool,
}

impl ItemSlot {
    fn complete(&self) -> bool {
        self.expected.is_some_and(|n| self.seen >= n)
    }
}

#[derive(Debug)]
pub(crate) struct Sequencer {
    deterministic: bool,
    items: Vec<ItemSlot>,
    /// Deterministic order: the first item not yet passed on.
    head: usize,
}

impl Sequencer {
    /// A sequencer for `items` plan items, of which those in `done` were
    /// delivered before (a resumed epoch).
    pub fn new(items: usize, deterministic: bool, done: &[u32]) -> Self {
        let mut slots: Vec<ItemSlot> = (0..items).map(|_| ItemSlot::default()).collect();
        for &i in done {
            if let Some(s) = slots.get_mut(i as usize) {
                s.released = true;
            }
        }
        let mut seq = Self {
            deterministic,
            items: slots,
            head: 0,
        };
        seq.skip_released();
        seq
    }

    /// Deterministic order: the first item not yet passed on, which is
    /// where the dispatch window starts.
    pub fn head(&self) -> usize {
        self.head
    }

    fn skip_released(&mut self) {
        while self.items.get(self.head).is_some_and(|s| s.released) {
            self.head += 1;
        }
    }

    /// Takes one event; appends what may go to the assembler now.
    pub fn push(&mut self, event: Event, out: &mut Vec<Ordered>) {
        let index = match &event {
            Event::Sample(s) => s.item as usize,
            Event::ItemDone { item, .. } => *item as usize,
        };
        let Some(slot) = self.items.get_mut(index) else {
            // Lanes only send items of the plan; nothing else can arrive.
            debug_assert!(false, "event for item {index} outside the plan");
            return;
        };
        match event {
            Event::Sample(s) => {
                slot.seen += 1;
                if self.deterministic {
                    slot.held.push(s);
                } else {
                    out.push(Ordered::Sample(s));
                }
            }
            Event::ItemDone { samples, .. } => slot.expected = Some(samples),
        }
        if !self.deterministic {
            if slot.complete() && !slot.released {
                slot.released = true;
                out.push(Ordered::ItemComplete(index as u32));
            }
            return;
        }
        while let Some(slot) = self.items.get_mut(self.head) {
            if !slot.complete() {
                break;
            }
            let mut held = std::mem::take(&mut slot.held);
            held.sort_by_key(|s| s.position);
            slot.released = true;
            out.extend(held.into_iter().map(Ordered::Sample));
            out.push(Ordered::ItemComplete(self.head as u32));
            self.head += 1;
            self.skip_released();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn sample(item: u32, position: u64) -> Event {
        Event::Sample(Sample {
            key: format!("i{item}p{position}"),
            label: 0,
            height: 0,
            width: 0,
            pixels: Bytes::new(),
            position,
            item,
            fields: Vec::new(),
            views: Vec::new(),
            device: None,
        })
    }

    fn names(out: &[Ordered]) -> Vec<String> {
        out.iter()
            .map(|o| match o {
                Ordered::Sample(s) => s.key.clone(),
                Ordered::ItemComplete(i) => format!("done{i}"),
            })
            .collect()
    }

    #[test]
    fn arrival_order_passes_samples_through_and_completes_after_the_last() {
        let mut seq = Sequencer::new(2, false, &[]);
        let mut out = Vec::new();
        seq.push(sample(1, 0), &mut out);
        // Item 0 is done with 2 samples accepted, one still on its way.
        seq.push(Event::ItemDone { item: 0, samples: 2 }, &mut out);
        seq.push(sample(0, 3), &mut out);
        seq.push(sample(0, 1), &mut out);
        assert_eq!(names(&out), ["i1p0", "i0p3", "i0p1", "done0"]);
    }

    #[test]
    fn deterministic_order_is_plan_order_then_position() {
        let mut seq = Sequencer::new(3, true, &[]);
        let mut out = Vec::new();
        seq.push(sample(1, 5), &mut out);
        seq.push(sample(1, 2), &mut out);
        seq.push(Event::ItemDone { item: 1, samples: 2 }, &mut out);
        seq.push(Event::ItemDone { item: 2, samples: 0 }, &mut out);
        assert!(out.is_empty(), "item 0 is not done: nothing may pass");
        seq.push(sample(0, 1), &mut out);
        seq.push(Event::ItemDone { item: 0, samples: 2 }, &mut out);
        assert!(out.is_empty());
        seq.push(sample(0, 0), &mut out);
        assert_eq!(names(&out), ["i0p0", "i0p1", "done0", "i1p2", "i1p5", "done1", "done2"]);
        assert_eq!(seq.head(), 3);
    }

    #[test]
    fn a_resumed_sequence_skips_the_items_delivered_before() {
        let mut seq = Sequencer::new(3, true, &[0, 2]);
        assert_eq!(seq.head(), 1);
        let mut out = Vec::new();
        seq.push(sample(1, 0), &mut out);
        seq.push(Event::ItemDone { item: 1, samples: 1 }, &mut out);
        assert_eq!(names(&out), ["i1p0", "done1"]);
        assert_eq!(seq.head(), 3);
    }
}
