//! A panic in a decoder costs one sample, never the worker: with the
//! `failpoints` feature (scripts/test.sh builds with it), a worker's decode
//! panics on a chosen key; the worker keeps the same process and keeps
//! serving, the rest of each epoch arrives, and the sample is reported as
//! an `internal` skip with its key and the panic's message.

use crate::support::{Worker, assert_exactly_once, http_get, image_folder_keys, pack, stoker, stream, synth_images};

#[test]
fn a_decode_panic_skips_its_sample_as_internal_and_the_worker_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 40, 2, 96, 72);
    let all = image_folder_keys(&images);
    let shards = dir.path().join("shards");
    pack(&images, shards.to_str().unwrap(), "50K", &[]);
    let bad = all[17].0.clone();
    let expected: Vec<(String, i64)> = all.iter().filter(|(k, _)| *k != bad).cloned().collect();

    let failpoints = format!("stoker-decode-panic=return({bad})");
    // One pool thread: a panic that killed it would stall the rest.
    let mut w = Worker::start_with(
        1,
        &["--metrics-listen", "127.0.0.1:0"],
        &[("FAILPOINTS", failpoints.as_str())],
    );
    let pid = w.child.0.id();
    let run = stream(
        &[&w],
        shards.to_str().unwrap(),
        &["--batch-size", "8", "--image-size", "32", "--epochs", "2"],
        &[],
    );
    // Every other sample, exactly once in each epoch; the chosen one
    // skipped once per epoch, as internal, naming its key and the panic.
    assert_exactly_once(&run, &expected, 0..2);
    assert_eq!(run.num("skipped"), 2, "{}", run.stderr());
    let stderr = run.stderr();
    let reason =
        format!("internal error: decode of {bad} panicked: failpoint stoker-decode-panic: injected panic on {bad}");
    // The summary lists each skip as "KEY: REASON".
    let listed = format!("{bad}: {reason}");
    assert_eq!(
        stderr.lines().filter(|l| l.trim() == listed).count(),
        2,
        "the skip not reported with its reason in:\n{stderr}"
    );

    // The same process, still serving.
    assert!(w.child.0.try_wait().unwrap().is_none(), "the worker exited");
    assert_eq!(w.child.0.id(), pid);
    let out = stoker().args(["health", &w.addr]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{}: serving", w.addr)
    );
    let metrics = http_get(w.metrics_url.as_deref().unwrap());
    assert!(
        metrics.contains("stoker_worker_skipped_total{reason=\"internal\"} 2"),
        "{metrics}"
    );
    // And it serves the next stream too.
    let again = stream(
        &[&w],
        shards.to_str().unwrap(),
        &["--batch-size", "8", "--image-size", "32"],
        &[],
    );
    assert_exactly_once(&again, &expected, 0..1);
}

/// On a GPU worker, a panic in a lane's host work (reading a sample's
/// header, resolving its steps) hands that sample to the CPU path, which
/// delivers it; a sample whose CPU decode panics is an internal skip, as on
/// a CPU worker; the lane lives on. Prints `skipped: <reason>` without a
/// GPU (scripts/gpu-check.sh runs it on one).
#[test]
fn a_panic_in_a_gpu_lanes_host_work_hands_the_sample_to_the_cpu() {
    if let Err(reason) = stoker_worker::gpu::probe() {
        crate::support::Need::Gpu.skip("a_panic_in_a_gpu_lanes_host_work_hands_the_sample_to_the_cpu", reason);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 60, 2, 256, 192);
    // A PNG goes to the CPU pool even on a `--gpu-only` worker: its decode
    // is the one that panics there.
    std::fs::write(
        images.join("class_000/zz_png.png"),
        include_bytes!("../../worker/formats/testdata/tiny.png"),
    )
    .unwrap();
    let all = image_folder_keys(&images);
    let shards = dir.path().join("shards");
    pack(&images, shards.to_str().unwrap(), "1M", &[]);
    let on_lane = all[5].0.clone();
    let on_cpu = "class_000/zz_png".to_owned();
    assert!(all.iter().any(|(k, _)| *k == on_cpu), "{all:?}");
    let expected: Vec<(String, i64)> = all.iter().filter(|(k, _)| *k != on_cpu).cloned().collect();
    let failpoints = format!("stoker-gpu-plan-panic=return({on_lane});stoker-decode-panic=return({on_cpu})");
    let mut w = Worker::start_with(
        2,
        &[
            "--device",
            "cuda",
            "--gpu-lanes",
            "1",
            "--gpu-batch",
            "16",
            "--gpu-only",
        ],
        &[("FAILPOINTS", failpoints.as_str())],
    );
    let run = stream(
        &[&w],
        shards.to_str().unwrap(),
        &["--batch-size", "8", "--image-size", "64", "--epochs", "2"],
        &[],
    );
    // Checked first: a worker built without the `failpoints` feature
    // ignores FAILPOINTS, and then the PNG arrives (61 of 60 delivered).
    assert_eq!(
        run.num("skipped"),
        2,
        "no injected panics: is {} built with --features failpoints? {}",
        crate::support::stoker_bin(),
        run.stderr()
    );
    assert_exactly_once(&run, &expected, 0..2);
    let listed = format!("{on_cpu}: internal error: decode of {on_cpu} panicked");
    let stderr = run.stderr();
    assert_eq!(
        stderr.lines().filter(|l| l.trim().starts_with(&listed)).count(),
        2,
        "{stderr}"
    );
    assert!(w.child.0.try_wait().unwrap().is_none(), "the worker exited");
    // The one lane still takes batches.
    let again = stream(
        &[&w],
        shards.to_str().unwrap(),
        &["--batch-size", "8", "--image-size", "64"],
        &[],
    );
    assert_exactly_once(&again, &expected, 0..1);
}
