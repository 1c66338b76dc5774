//! The ledger's bookkeeping, driven without a network.
#![allow(
    clippy::single_range_in_vec_init,
    reason = "position sets are compared with their ranges, one range or several"
)]

use super::*;
use crate::config::MAX_LANES_PER_WORKER;
use bytes::Bytes;

fn ledger(items: usize, workers: usize) -> Ledger {
    let shards = (0..items)
        .map(|i| PlanItem {
            shard: stoker_core::ShardRef {
                name: format!("s{i}.tar"),
                size_bytes: 1,
                samples: None,
            },
            start: 0,
            end: None,
        })
        .collect();
    let addrs: Vec<(String, CreditLimit)> = (0..workers)
        .map(|w| (format!("w{w}"), CreditLimit::Items(MAX_LANES_PER_WORKER)))
        .collect();
    Ledger::new(shards, &addrs)
}

/// `items` items of `samples` samples each (an index), one worker.
fn indexed_ledger(items: usize, samples: u64, limit: CreditLimit) -> Ledger {
    let shards = (0..items)
        .map(|i| PlanItem {
            shard: stoker_core::ShardRef {
                name: format!("s{i}.tar"),
                size_bytes: 1,
                samples: Some(samples),
            },
            start: 0,
            end: None,
        })
        .collect();
    Ledger::new(shards, &[("w0".to_owned(), limit)])
}

/// Samples at `positions`, keyed `k<position>`.
fn named(positions: std::ops::Range<u64>) -> Vec<Sample> {
    let names: Vec<(String, u64)> = positions.map(|p| (format!("k{p}"), p)).collect();
    samples(&names.iter().map(|(k, p)| (k.as_str(), *p)).collect::<Vec<_>>())
}

fn skipped(key: &str, position: u64) -> Skipped {
    Skipped {
        key: key.into(),
        position,
        reason: "corrupt".into(),
    }
}

#[test]
fn credit_in_samples_takes_items_until_their_samples_reach_the_worker_s_need() {
    // The worker needs 100 samples in flight; items hold 40 each.
    let l = indexed_ledger(10, 40, CreditLimit::Samples(100));
    let a = l.take(0).unwrap();
    let b = l.take(0).unwrap();
    let _c = l.take(0).unwrap();
    assert!(l.take(0).is_none(), "120 samples expected: over the 100 needed");
    // 30 of a's samples arrive (or are skipped): 90 outstanding, room again.
    l.accept(&a, named(0..29), &[skipped("k29", 29)]).unwrap();
    let d = l.take(0).unwrap();
    assert!(l.take(0).is_none());
    // A duplicate sample brings no credit back; a completed item all it held.
    l.accept(&d, named(0..1), &[]).unwrap();
    l.accept(&d, named(0..1), &[]).unwrap();
    assert!(l.take(0).is_none());
    l.accept(&a, named(30..40), &[]).unwrap();
    assert_eq!(l.complete(&a), Some(39));
    // b, c and d: 40 + 40 + 39 expected.
    assert!(l.take(0).is_none());
    l.accept(&b, named(100..120), &[]).unwrap();
    assert!(l.take(0).is_some(), "99 expected: room for one more");
}

#[test]
fn a_failed_or_refused_attempt_gives_its_credit_back_and_a_retry_expects_only_the_rest() {
    let l = indexed_ledger(3, 40, CreditLimit::Samples(50));
    let a = l.take(0).unwrap();
    let b = l.take(0).unwrap();
    assert!(l.take(0).is_none());
    l.accept(&a, named(0..35), &[]).unwrap();
    l.requeue(&a, Some(0), "w0", "reset", 5);
    l.release(&b);
    // Nothing is held now. The retry of `a` expects its 5 missing
    // samples and `b` all 40: 45, under 50, so the third item goes too
    // (had the retry expected 40 again, 80 would have stopped it).
    let mut again = [l.take(0).unwrap(), l.take(0).unwrap()];
    again.sort_by_key(|lease| lease.index);
    assert_eq!((again[0].skip.len(), again[1].skip.len()), (35, 0));
    assert_eq!(l.take(0).map(|c| c.index), Some(2));
}

#[test]
fn a_fixed_limit_counts_items_and_unknown_sizes_learn_from_completed_items() {
    let l = ledger(5, 1);
    l.set_limit(0, CreditLimit::Items(2));
    let a = l.take(0).unwrap();
    let _b = l.take(0).unwrap();
    assert!(l.take(0).is_none(), "two items at most");
    l.accept(&a, named(0..10), &[]).unwrap();
    assert!(l.take(0).is_none(), "samples do not matter with an item limit");
    assert_eq!(l.complete(&a), Some(10));
    let c = l.take(0).unwrap();
    // No index: items are expected to be as large as those done (10),
    // so a need of 15 samples admits a second item, not a third.
    l.set_limit(0, CreditLimit::Samples(15));
    l.release(&c);
    let _c = l.take(0).unwrap();
    let _d = l.take(0).unwrap();
    assert!(l.take(0).is_none());
}

/// Samples of (key, position).
fn samples(list: &[(&str, u64)]) -> Vec<Sample> {
    list.iter()
        .map(|&(key, position)| Sample {
            key: key.to_owned(),
            label: 0,
            height: 0,
            width: 0,
            pixels: Bytes::new(),
            position,
            item: 0,
            fields: Vec::new(),
            views: Vec::new(),
            device: None,
        })
        .collect()
}

fn keys(v: &[Sample]) -> Vec<&str> {
    v.iter().map(|s| s.key.as_str()).collect()
}

#[test]
fn a_reassigned_item_skips_what_arrived_and_the_old_attempt_is_ignored() {
    let l = ledger(1, 2);
    let first = l.take(0).unwrap();
    let got = l.accept(&first, samples(&[("a", 0), ("b", 1)]), &[]).unwrap();
    assert_eq!(keys(&got), ["a", "b"]);
    l.requeue(&first, Some(0), "w0", "stalled", 5);

    // Worker 0 failed it: it goes to worker 1, with a and b to skip.
    assert!(l.take(0).is_none());
    let second = l.take(1).unwrap();
    assert_eq!(second.skip.ranges(), &[0..2]);

    // The stalled attempt wakes up: everything it sends is discarded.
    assert!(l.accept(&first, samples(&[("c", 2)]), &[]).is_none());
    assert!(l.complete(&first).is_none());

    // The new attempt delivers only new samples, then completes the epoch.
    let got = l.accept(&second, samples(&[("b", 1), ("c", 2)]), &[]).unwrap();
    assert_eq!(keys(&got), ["c"]);
    // a, b and c were accepted for delivery, over both attempts.
    assert_eq!(l.complete(&second), Some(3));
    assert_eq!(l.remaining(), 0);
    assert!(l.fatal().is_none());
}

#[test]
fn an_item_failing_too_often_ends_the_epoch_with_its_name() {
    let l = ledger(1, 1);
    for _ in 0..3 {
        // One worker: it gets the item again after failing it.
        let lease = l.take(0).unwrap();
        l.requeue(&lease, Some(0), "w0", "connection reset", 3);
    }
    let err = l.fatal().unwrap().to_string();
    assert!(err.contains("s0.tar") && err.contains("3 times"), "{err}");
}

#[test]
fn an_item_goes_back_to_a_worker_it_failed_on_when_the_others_are_down() {
    let l = ledger(1, 2);
    let first = l.take(0).unwrap();
    l.requeue(&first, Some(0), "w0", "reset", 5);
    // Worker 1 has not failed the item, and is healthy: it waits for it.
    assert!(l.take(0).is_none());
    // Worker 1 is down: worker 0 gets the item again.
    l.worker_failed(1, "connection refused", Duration::from_secs(60));
    assert!(l.take(0).is_some());
}

#[test]
fn a_window_holds_lanes_back_until_the_frontier_moves() {
    let l = ledger(5, 1);
    l.resume(&[0], &[(1, PositionSet::from_ranges([4..5]))]);
    assert_eq!(l.remaining(), 4);
    l.set_window(2);
    l.advance(1);
    let a = l.take(0).unwrap();
    assert_eq!((a.index, a.skip.ranges()), (1, &[4..5][..]));
    assert_eq!(l.take(0).unwrap().index, 2);
    assert!(l.take(0).is_none(), "item 3 is past the window");
    l.advance(2);
    assert_eq!(l.take(0).unwrap().index, 3);
}

#[test]
fn skipped_samples_are_not_reported_twice() {
    let l = ledger(1, 2);
    let first = l.take(0).unwrap();
    l.accept(&first, Vec::new(), &[skipped("x", 7)]).unwrap();
    l.requeue(&first, Some(0), "w0", "reset", 5);
    let second = l.take(1).unwrap();
    assert_eq!(second.skip.ranges(), &[7..8]);
}

#[test]
fn a_retired_worker_takes_nothing_and_counts_as_gone_even_after_finishing_an_item() {
    let l = ledger(3, 2);
    let held = l.take(0).unwrap();
    l.retire(0, "no longer an address of dns://w:1");
    assert!(l.take(0).is_none(), "a retired worker took an item");
    // Its item in progress still finishes, and does not bring it back.
    l.complete(&held);
    l.worker_ok(0);
    assert!(l.is_retired(0) && l.is_failing(0));
    assert!(l.take(1).is_some());
    l.restore(0);
    assert!(!l.is_failing(0));
    assert!(l.take(0).is_some(), "a restored worker takes items again");
}

#[test]
fn when_every_worker_is_retired_past_the_patience_the_epoch_fails_naming_why() {
    let l = ledger(2, 1);
    l.retire(0, "no longer an address of dns://w:1");
    l.check_gone(Duration::from_secs(3600));
    assert!(!l.is_finished(), "failed before the patience ran out");
    l.check_gone(Duration::ZERO);
    assert!(l.is_finished());
    let err = l.fatal().unwrap().to_string();
    assert!(err.contains("w0 (no longer an address of dns://w:1)"), "{err}");
}

#[test]
fn a_worker_added_mid_epoch_gets_the_next_number_and_pending_items() {
    let l = ledger(2, 1);
    let first = l.take(0).unwrap();
    let w = l.add_worker("w1", CreditLimit::Items(1));
    assert_eq!(w, 1);
    let second = l.take(w).unwrap();
    assert_ne!(first.index, second.index);
    assert!(l.take(w).is_none(), "the new worker's credit is one item");
}

#[test]
fn samples_with_one_key_are_told_apart_by_position() {
    // Merged WebDataset shards repeat keys: "k" at 0 and at 2, "j" at 1.
    let l = ledger(1, 2);
    let first = l.take(0).unwrap();
    let got = l.accept(&first, samples(&[("k", 0), ("j", 1), ("k", 2)]), &[]).unwrap();
    assert_eq!(keys(&got), ["k", "j", "k"]);
    // The same position again is a duplicate, whatever its key.
    assert!(
        l.accept(&first, samples(&[("k", 2), ("other", 0)]), &[])
            .unwrap()
            .is_empty()
    );
    l.requeue(&first, Some(0), "w0", "killed", 5);
    // The retry skips positions 0..3; a fourth sample with the key "k"
    // is new.
    let second = l.take(1).unwrap();
    assert_eq!(second.skip.ranges(), &[0..3]);
    let got = l.accept(&second, samples(&[("k", 3)]), &[]).unwrap();
    assert_eq!(keys(&got), ["k"]);
    assert_eq!(l.complete(&second), Some(4));
}

#[test]
fn a_worker_set_aside_takes_nothing_for_the_rest_of_the_epoch() {
    let l = ledger(3, 2);
    let held = l.take(0).unwrap();
    l.set_aside(
        0,
        "sample at position 9 is outside the item's range 0..5",
        Duration::from_secs(60),
    );
    l.release(&held);
    assert!(l.take(0).is_none(), "a worker set aside took an item");
    // Neither its DNS name coming back nor a good answer restores it.
    l.restore(0);
    l.worker_ok(0);
    assert!(l.take(0).is_none());
    // Its item goes to the other worker, not counted against the item.
    assert_eq!(l.take(1).map(|lease| lease.index), Some(held.index));
    // Alone, it ends the epoch once the patience runs out, saying why.
    let alone = ledger(1, 1);
    alone.set_aside(0, "sample outside the item's range", Duration::ZERO);
    let err = alone.fatal().unwrap().to_string();
    assert!(err.contains("w0 (sample outside the item's range)"), "{err}");
}

#[test]
fn the_ledger_of_a_10m_sample_epoch_holds_a_few_bytes_per_item() {
    // 10,000 items of 1,000 samples (an index), as a 10 M-sample epoch:
    // every sample arrives, in order within a chunk, chunks out of order.
    const ITEMS: usize = 10_000;
    const SAMPLES: u64 = 1_000;
    let l = indexed_ledger(ITEMS, SAMPLES, CreditLimit::Items(ITEMS));
    let leases: Vec<Lease> = (0..ITEMS).map(|_| l.take(0).unwrap()).collect();
    let mut peak = 0;
    for lease in &leases {
        // A GPU worker's stragglers: the second half before the first.
        l.accept(lease, named(SAMPLES / 2..SAMPLES), &[]).unwrap();
        peak = peak.max(l.received_heap_bytes());
        l.accept(lease, named(0..SAMPLES / 2), &[]).unwrap();
    }
    let after = l.received_heap_bytes();
    println!(
        "ledger of {} samples in {ITEMS} items: {after} bytes of received positions ({:.1} per item), peak {peak}",
        ITEMS as u64 * SAMPLES,
        after as f64 / ITEMS as f64
    );
    // One range per item (16 bytes, in a vector of capacity 4 at most).
    assert!(after <= ITEMS * 64, "{after} bytes");
    assert!(peak <= ITEMS * 64, "{peak} bytes");
}
