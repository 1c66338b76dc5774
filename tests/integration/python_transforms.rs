//! `stoker.transforms` (Python): torchvision pipelines converted and run
//! through real workers; MixUp / CutMix on the batch.
//!
//! The checks live in tests/python/transforms_check.py. The test venv has
//! no torch, so its torchvision section prints a SKIP line here; on a
//! machine with torch and torchvision,
//! `python tests/python/transforms_check.py --torchvision` runs it.

use std::ffi::OsStr;

use crate::support::{Worker, image_folder_keys, pack, python, python_script, run_ok, synth_images};

/// Runs transforms_check.py with `args`, returning its stdout.
fn transforms_check(args: &[&OsStr]) -> String {
    let out = run_ok(python().arg(python_script("transforms_check.py")).args(args));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}");
    stdout
}

#[test]
fn python_transforms_have_torchvision_defaults_round_trip_and_refuse_by_position() {
    let stdout = transforms_check(&[]);
    // Every registered op: the schema's defaults and argument order as
    // Python's classes give them; JSON round trips; Python's refusals
    // naming the op and the argument.
    let every_op = format!(
        "transforms json: {} ops, defaults, order and round trips ok",
        stoker_core::transform::OP_NAMES.len()
    );
    for line in [
        every_op.as_str(),
        // Every op accepted by the worker's parser (check_transform), its
        // canonical JSON read back; the parser's refusals name ops[i].
        "transforms json: every op accepted by the worker's parser",
        // Every argument kind of core's table has exactly one converter in
        // stoker/_kinds.py, and no converter is of a kind that is gone.
        "transforms kinds: ",
        // Bad pipelines, sizes, dtype / mean conflicts and batch transforms
        // refused by the Loader before it connects.
        "transforms loader refusals:",
        // MixUp / CutMix on numpy batches: formulas, soft labels, determinism.
        "transforms mix: MixUp / CutMix on numpy batches match the formulas",
        // The Loader's conversion from the pipeline's ToDtype / Normalize
        // and its batch transform, on batches from a stand-in client.
        "transforms loader conversion: pipeline dtype/mean/std and MixUp applied to batches",
        "transforms check: all passed",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    assert!(
        stdout.contains("SKIP from_torchvision") || stdout.contains("transforms torchvision "),
        "{stdout}"
    );
}

#[test]
fn a_python_pipeline_streams_every_sample_once_through_workers_with_mixup_and_cutmix() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 90, 3, 96, 72);
    pack(&images, shards.to_str().unwrap(), "40K", &[]);
    let tsv = dir.path().join("expected.tsv");
    let lines: String = image_folder_keys(&images)
        .iter()
        .map(|(k, l)| format!("{k}\t{l}\n"))
        .collect();
    std::fs::write(&tsv, lines).unwrap();
    let (w1, w2) = (Worker::start(1), Worker::start(1));
    let workers = format!("{},{}", w1.addr, w2.addr);
    let stdout = transforms_check(&[
        OsStr::new("--workers"),
        OsStr::new(&workers),
        OsStr::new("--dataset"),
        shards.as_os_str(),
        OsStr::new("--expected"),
        tsv.as_os_str(),
    ]);
    // RandomResizedCrop + flip + ColorJitter + ToDtype + Normalize +
    // RandomErasing: every sample once, float32 [B, 3, 40, 40], values
    // within the normalised [0, 1]; MixUp / CutMix soft labels summing to
    // 1, the same in two runs; CutMix on the uint8 train preset.
    assert!(
        stdout.contains("transforms loader: 90 samples exactly once through a pipeline, float32 [B, 3, 40, 40]"),
        "{stdout}"
    );
    assert!(stdout.contains("transforms check: all passed"), "{stdout}");
}
