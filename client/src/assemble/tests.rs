use super::*;
use crate::buffers::HostPool;

// The host side needs no device: batches whose device part is `()`.
type Assembler = super::Assembler<()>;
type Batch = super::Batch<()>;

fn assembler(epoch: u64, batch_size: usize, policy: LastBatch, target: Option<u64>, first_index: u64) -> Assembler {
    let buffers = BatchBuffers::Host(HostPool::new(batch_size * 12, 2));
    Assembler::new(
        epoch,
        ImageSize::Square(2),
        batch_size,
        policy,
        target,
        first_index,
        buffers,
    )
}

/// Pushes samples `range`, returning the batches filled.
async fn push_all(a: &mut Assembler, range: std::ops::Range<u8>) -> Vec<Batch> {
    let mut out = Vec::new();
    for i in range {
        out.extend(a.push(sample(i)).await.unwrap());
    }
    out
}

fn sample(i: u8) -> Sample {
    Sample {
        key: format!("k{i}"),
        label: i64::from(i),
        height: 2,
        width: 2,
        pixels: Bytes::from(vec![i; 2 * 2 * 3]),
        position: u64::from(i),
        item: 0,
        fields: Vec::new(),
        views: Vec::new(),
        device: None,
    }
}

fn lens(batches: &[Batch]) -> Vec<(usize, usize)> {
    batches.iter().map(|b| (b.len(), b.padded)).collect()
}

#[tokio::test]
async fn fills_batches_in_order_and_keeps_the_tail() {
    let mut a = assembler(3, 2, LastBatch::Partial, None, 0);
    assert!(a.push(sample(0)).await.unwrap().is_none());
    let b = a.push(sample(1)).await.unwrap().unwrap();
    assert_eq!((b.epoch, b.index, b.len()), (3, 0, 2));
    assert_eq!(b.image(1), &[1u8; 12]);
    assert_eq!(b.keys, ["k0", "k1"]);
    assert!(a.push(sample(2)).await.unwrap().is_none());
    let tail = a.finish().await.unwrap();
    assert_eq!(tail.len(), 1);
    assert_eq!((tail[0].index, tail[0].len(), tail[0].pixels.len()), (1, 1, 12));
    assert!(a.finish().await.unwrap().is_empty());
}

#[tokio::test]
async fn drop_discards_the_tail_and_pad_fills_it_with_samples_received_before() {
    let mut a = assembler(0, 4, LastBatch::Drop, None, 0);
    push_all(&mut a, 0..1).await;
    assert!(a.finish().await.unwrap().is_empty());

    let mut a = assembler(0, 4, LastBatch::Pad, None, 0);
    push_all(&mut a, 0..2).await;
    let b = a.finish().await.unwrap().pop().unwrap();
    assert_eq!((b.len(), b.padded, b.real()), (4, 2, 2));
    assert_eq!(b.keys, ["k0", "k1", "k0", "k1"]);
    assert_eq!(b.image(3), &[1u8; 12]);
    assert_eq!(b.items.len(), 2, "padding belongs to no item");
}

#[tokio::test]
async fn a_known_batch_count_is_met_exactly() {
    // Planned 3 batches of 2, but only 3 samples came (skips): the
    // rank still yields 3 batches.
    let mut a = assembler(0, 2, LastBatch::Pad, Some(3), 0);
    let mut out = push_all(&mut a, 0..3).await;
    out.extend(a.finish().await.unwrap());
    assert_eq!(lens(&out), [(2, 0), (2, 1), (2, 2)]);
    assert_eq!(out.iter().map(|b| b.index).collect::<Vec<_>>(), [0, 1, 2]);

    // Partial keeps the last batch partial, but fills up batches that
    // are missing.
    let mut a = assembler(0, 2, LastBatch::Partial, Some(2), 0);
    let mut out = push_all(&mut a, 0..1).await;
    out.extend(a.finish().await.unwrap());
    assert_eq!(lens(&out), [(2, 1), (2, 2)]);
    let mut a = assembler(0, 2, LastBatch::Partial, Some(3), 0);
    let mut out = push_all(&mut a, 0..2).await;
    out.extend(a.finish().await.unwrap());
    assert_eq!(lens(&out), [(2, 0), (2, 2), (2, 2)]);
    let mut a = assembler(0, 2, LastBatch::Partial, Some(2), 0);
    let mut out = push_all(&mut a, 0..3).await;
    out.extend(a.finish().await.unwrap());
    assert_eq!(lens(&out), [(2, 0), (1, 0)]);

    // More samples than planned: the surplus is dropped.
    let mut a = assembler(0, 2, LastBatch::Drop, Some(1), 0);
    let out = push_all(&mut a, 0..5).await;
    assert_eq!(lens(&out), [(2, 0)]);
    assert!(a.finish().await.unwrap().is_empty());
    assert_eq!(a.dropped, 3);
}

/// A rank short of samples (6 for 3 batches of 4) pads with real
/// samples, distinct within each batch: its last partial batch with the
/// batch before it, a whole padded batch with the last ones it had.
#[tokio::test]
async fn padding_is_distinct_real_samples_received_before() {
    let mut a = assembler(0, 4, LastBatch::Pad, Some(3), 0);
    let mut out = push_all(&mut a, 0..6).await;
    out.extend(a.finish().await.unwrap());
    assert_eq!(lens(&out), [(4, 0), (4, 2), (4, 4)]);
    assert_eq!(out[1].keys, ["k4", "k5", "k2", "k3"]);
    assert_eq!(out[1].labels, [4, 5, 2, 3]);
    assert_eq!(out[1].image(2), &[2u8; 12]);
    assert_eq!(out[2].keys, ["k2", "k3", "k4", "k5"]);
    // Far from the end, only the last sample is held (the ring's
    // slots go back); from the third batch before it, a batch's worth
    // (10 planned batches of 2: the 15th sample is in the 8th).
    let mut a = assembler(0, 2, LastBatch::Pad, Some(10), 0);
    push_all(&mut a, 0..15).await;
    assert_eq!(a.pool.len(), 2, "the last three batches keep a batch");
    let mut a = assembler(0, 2, LastBatch::Pad, Some(10), 0);
    push_all(&mut a, 0..5).await;
    assert_eq!(a.pool.len(), 1);
}

#[tokio::test]
async fn with_nothing_to_repeat_padding_is_blank() {
    let mut a = assembler(4, 2, LastBatch::Drop, Some(1), 0);
    let b = a.finish().await.unwrap().pop().unwrap();
    assert_eq!((b.len(), b.padded, b.real()), (2, 2, 0));
    assert_eq!((b.labels.clone(), b.image(1)), (vec![-1, -1], &[0u8; 12][..]));
}

#[tokio::test]
async fn completions_ride_on_the_next_batch() {
    let mut a = assembler(0, 2, LastBatch::Partial, None, 5);
    push_all(&mut a, 0..1).await;
    a.complete(7);
    let b = a.push(sample(1)).await.unwrap().unwrap();
    assert_eq!((b.index, b.completes.clone()), (5, vec![7]));
    push_all(&mut a, 2..3).await;
    a.complete(8);
    let tail = a.finish().await.unwrap();
    assert_eq!(tail[0].completes, [8]);
}

/// A sample of `h` x `w` whose every byte is `i`.
fn sized(i: u8, h: u32, w: u32) -> Sample {
    Sample {
        height: h,
        width: w,
        pixels: Bytes::from(vec![i; (h * w * 3) as usize]),
        ..sample(i)
    }
}

#[tokio::test]
async fn images_of_their_own_sizes_are_packed_at_the_top_left_of_the_largest() {
    let buffers = BatchBuffers::Host(HostPool::new(0, 2));
    let mut a = Assembler::new(0, ImageSize::Each, 2, LastBatch::Pad, None, 0, buffers);
    assert!(a.push(sized(1, 2, 3)).await.unwrap().is_none());
    let b = a.push(sized(2, 3, 1)).await.unwrap().unwrap();
    assert_eq!((b.height, b.width, b.image_sizes.clone()), (3, 3, vec![(2, 3), (3, 1)]));
    let rows = |i: usize| -> Vec<Vec<u8>> { b.image(i).chunks(9).map(<[u8]>::to_vec).collect() };
    assert_eq!(rows(0), [vec![1; 9], vec![1; 9], vec![0; 9]]);
    let one_wide = [2, 2, 2, 0, 0, 0, 0, 0, 0].to_vec();
    assert_eq!(rows(1), [one_wide.clone(), one_wide.clone(), one_wide]);
    drop(b);
    // The buffer comes back holding those bytes: padding is written
    // as zeros, never left as it was; padding samples keep their size.
    assert!(a.push(sized(7, 1, 1)).await.unwrap().is_none());
    let b = a.finish().await.unwrap().pop().unwrap();
    assert_eq!((b.height, b.width, b.padded), (3, 1, 1));
    assert_eq!(b.image_sizes, [(1, 1), (3, 1)], "padded with the sample before");
    assert_eq!(b.image(0), &[7, 7, 7, 0, 0, 0, 0, 0, 0]);
    assert_eq!(b.image(1), &[2; 9]);
}

/// Grouped by aspect: landscape images (wider than high) fill batches of
/// their own; at the end the two partial batches are combined, oldest
/// first, so the count is as without grouping; an item's completion waits
/// for its samples in the other group's batch.
#[tokio::test]
async fn grouped_by_aspect_batches_hold_one_aspect_until_the_end() {
    let buffers = BatchBuffers::Host(HostPool::new(0, 2));
    let mut a = Assembler::new(0, ImageSize::Each, 3, LastBatch::Partial, Some(3), 0, buffers).grouped_by_aspect(true);
    // (key, height, width, item): landscape are 1, 3, 4, 6.
    let shapes = [
        (0, 4, 2, 0),
        (1, 2, 4, 0),
        (2, 3, 3, 1),
        (3, 1, 5, 1),
        (4, 2, 3, 2),
        (5, 5, 5, 2),
        (6, 2, 6, 2),
    ];
    let mut out = Vec::new();
    for (i, h, w, item) in shapes {
        let s = Sample { item, ..sized(i, h, w) };
        out.extend(a.push(s).await.unwrap());
        if i == 3 {
            a.complete(0);
            a.complete(1);
        }
    }
    out.extend(a.finish().await.unwrap());
    let keys: Vec<Vec<String>> = out.iter().map(|b| b.keys.clone()).collect();
    assert_eq!(keys, [vec!["k1", "k3", "k4"], vec!["k0", "k2", "k5"], vec!["k6"]]);
    assert_eq!(out.iter().map(|b| b.index).collect::<Vec<_>>(), [0, 1, 2]);
    // Item 0's sample k0 waited in the other batch: its completion rides
    // on the batch that delivered it, with item 1's.
    assert_eq!(out[0].completes, Vec::<u32>::new());
    assert_eq!(out[1].completes, [0, 1]);
    assert_eq!((out[0].height, out[0].width), (2, 5));
    assert_eq!(out[1].image_sizes, [(4, 2), (3, 3), (5, 5)]);
}

#[tokio::test]
async fn grouped_partial_batches_are_combined_into_full_ones_first() {
    let buffers = BatchBuffers::Host(HostPool::new(0, 2));
    let mut a = Assembler::new(0, ImageSize::Each, 3, LastBatch::Partial, None, 0, buffers).grouped_by_aspect(true);
    for (i, h, w) in [(0, 1, 2), (1, 2, 1), (2, 1, 2), (3, 2, 1)] {
        assert!(a.push(sized(i, h, w)).await.unwrap().is_none());
    }
    let out = a.finish().await.unwrap();
    let keys: Vec<Vec<String>> = out.iter().map(|b| b.keys.clone()).collect();
    assert_eq!(keys, [vec!["k1", "k3", "k0"], vec!["k2"]]);
}

#[test]
fn every_rank_gets_the_same_number_of_batches() {
    // 70 samples, 3 ranks (23, 23, 24), batches of 4.
    assert_eq!(batches_per_rank(70, 3, 4, LastBatch::Drop), 5);
    assert_eq!(batches_per_rank(70, 3, 4, LastBatch::Partial), 6);
    assert_eq!(batches_per_rank(70, 3, 4, LastBatch::Pad), 6);
    assert_eq!(batches_per_rank(70, 1, 7, LastBatch::Drop), 10);
    assert_eq!(batches_per_rank(0, 2, 4, LastBatch::Pad), 0);
}
