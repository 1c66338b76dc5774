//! The ledger's bookkeeping, driven without a network.

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

fn named(keys: std::ops::Range<usize>) -> Vec<Sample> {
    let names: Vec<String> = keys.map(|k| format!("k{k}")).collect();
    samples(&names.iter().map(String::as_str).collect::<Vec<_>>())
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
    let skipped = [Skipped {
        key: "k29".into(),
        reason: "corrupt".into(),
    }];
    l.accept(&a, named(0..29), &skipped).unwrap();
    let d = l.take(0).unwrap();
    assert!(l.take(0).is_none());
    // A duplicate key brings no credit back; a completed item all it held.
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

fn samples(keys: &[&str]) -> Vec<Sample> {
    keys.iter()
        .map(|k| Sample {
            key: (*k).to_owned(),
            label: 0,
            pixels: Bytes::new(),
            position: 0,
            item: 0,
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
    let got = l.accept(&first, samples(&["a", "b"]), &[]).unwrap();
    assert_eq!(keys(&got), ["a", "b"]);
    l.requeue(&first, Some(0), "w0", "stalled", 5);

    // Worker 0 failed it: it goes to worker 1, with a and b to skip.
    assert!(l.take(0).is_none());
    let second = l.take(1).unwrap();
    let mut skip = second.skip.clone();
    skip.sort();
    assert_eq!(skip, ["a", "b"]);

    // The stalled attempt wakes up: everything it sends is discarded.
    assert!(l.accept(&first, samples(&["c"]), &[]).is_none());
    assert!(l.complete(&first).is_none());

    // The new attempt delivers only new keys, then completes the epoch.
    let got = l.accept(&second, samples(&["b", "c"]), &[]).unwrap();
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
    l.resume(&[0], &[(1, vec!["a".into()])]);
    assert_eq!(l.remaining(), 4);
    l.set_window(2);
    l.advance(1);
    let a = l.take(0).unwrap();
    assert_eq!((a.index, a.skip.clone()), (1, vec!["a".to_owned()]));
    assert_eq!(l.take(0).unwrap().index, 2);
    assert!(l.take(0).is_none(), "item 3 is past the window");
    l.advance(2);
    assert_eq!(l.take(0).unwrap().index, 3);
}

#[test]
fn skipped_samples_are_not_reported_twice() {
    let l = ledger(1, 2);
    let first = l.take(0).unwrap();
    let bad = Skipped {
        key: "x".into(),
        reason: "corrupt".into(),
    };
    l.accept(&first, Vec::new(), std::slice::from_ref(&bad)).unwrap();
    l.requeue(&first, Some(0), "w0", "reset", 5);
    let second = l.take(1).unwrap();
    assert_eq!(second.skip, ["x"]);
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
