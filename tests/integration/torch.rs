//! The Python package with torch installed (target/torchenv): the loader
//! as a `torch.utils.data.IterableDataset` over local workers with a
//! torchvision pipeline, and `examples/train_ddp.py` under torchrun with
//! gloo on the CPU, two ranks.

use std::collections::BTreeMap;

use crate::support::{image_folder_keys, pack, python_script, repo_root, run_ok, synth_images, torch_python};

fn dataset(images: usize) -> (tempfile::TempDir, std::path::PathBuf, Vec<(String, i64)>) {
    let dir = tempfile::tempdir().unwrap();
    let pics = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&pics, images, 3, 64, 48);
    pack(&pics, shards.to_str().unwrap(), "20K", &[]);
    let keys = image_folder_keys(&pics);
    (dir, shards, keys)
}

#[test]
fn a_torch_dataloader_iterates_a_loader_over_local_workers_with_a_torchvision_compose() {
    let (dir, shards, keys) = dataset(48);
    let tsv = dir.path().join("expected.tsv");
    std::fs::write(
        &tsv,
        keys.iter().map(|(k, l)| format!("{k}\t{l}\n")).collect::<String>(),
    )
    .unwrap();
    let out = run_ok(
        torch_python()
            .arg(python_script("torch_local_check.py"))
            .arg(&shards)
            .arg(&tsv),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        stdout.contains("over local workers: 48 samples exactly once"),
        "{stdout}"
    );
}

#[test]
fn train_ddp_under_torchrun_trains_on_every_sample_once_across_two_ranks() {
    // 61 samples: the ranks' shares cannot both fill batches of 8, so at
    // least one rank pads (the example's `last_batch="pad"`).
    let (dir, shards, keys) = dataset(61);
    let out_dir = dir.path().join("keys");
    std::fs::create_dir(&out_dir).unwrap();
    let out = run_ok(
        torch_python()
            .args(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"])
            .arg(repo_root().join("client/python/examples/train_ddp.py"))
            .arg("--dataset")
            .arg(&shards)
            .args([
                "--epochs",
                "2",
                "--batch-size",
                "8",
                "--image-size",
                "32",
                "--classes",
                "3",
            ])
            .args(["--local-threads", "1", "--keys-out"])
            .arg(&out_dir)
            .env("OMP_NUM_THREADS", "1"),
    );
    println!("{}", String::from_utf8_lossy(&out.stdout));
    let ranks: Vec<serde_json::Value> = (0..2)
        .map(|r| {
            let text = std::fs::read_to_string(out_dir.join(format!("rank-{r}.json"))).unwrap();
            serde_json::from_str(&text).unwrap()
        })
        .collect();
    assert_eq!(
        ranks[0]["batches"], ranks[1]["batches"],
        "equal batch counts across ranks"
    );
    let expected: std::collections::BTreeSet<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
    for epoch in 0..2 {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for r in &ranks {
            for k in r["keys"][epoch].as_array().unwrap() {
                *seen.entry(k.as_str().unwrap().to_owned()).or_default() += 1;
            }
        }
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "epoch {epoch}: trained on twice: {twice:?}");
        let got: std::collections::BTreeSet<&str> = seen.keys().map(String::as_str).collect();
        assert_eq!(got, expected, "epoch {epoch}: every sample once across the ranks");
    }
    // Padding: real samples of the dataset, distinct within each batch,
    // and left out of the keys trained on (above).
    let mut padded = 0;
    for r in &ranks {
        for epoch in r["padding"].as_array().unwrap() {
            for batch in epoch.as_array().unwrap() {
                let pads: Vec<&str> = batch.as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
                let distinct: std::collections::BTreeSet<&str> = pads.iter().copied().collect();
                assert_eq!(
                    distinct.len(),
                    pads.len(),
                    "a sample twice in one batch's padding: {pads:?}"
                );
                assert!(
                    pads.iter().all(|k| expected.contains(k)),
                    "padding that is no sample: {pads:?}"
                );
                padded += pads.len();
            }
        }
    }
    assert!(padded > 0, "61 samples in batches of 8 on 2 ranks: some rank pads");
}

/// Keys each rank trained on in epoch 0, from `train_lightning.py
/// --keys-out`, with its batch count.
fn lightning_keys(dir: &std::path::Path, rank: usize) -> (Vec<String>, usize) {
    let text = std::fs::read_to_string(dir.join(format!("rank-{rank}.jsonl"))).unwrap_or_default();
    let mut keys = Vec::new();
    let mut batches = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["epoch"], 0);
        batches += 1;
        keys.extend(
            v["keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap().to_owned()),
        );
    }
    (keys, batches)
}

#[test]
fn a_lightning_run_stopped_mid_epoch_resumes_from_its_checkpoint_with_the_rest_exactly_once() {
    let (dir, shards, keys) = dataset(64);
    let script = repo_root().join("client/python/examples/train_lightning.py");
    let (first, second, ckpt) = (
        dir.path().join("first"),
        dir.path().join("second"),
        dir.path().join("ckpt"),
    );
    for d in [&first, &second] {
        std::fs::create_dir(d).unwrap();
    }
    let run = |keys_out: &std::path::Path, more: &[&str]| {
        let out = run_ok(
            torch_python()
                .arg(&script)
                .arg("--dataset")
                .arg(&shards)
                .args([
                    "--devices",
                    "2",
                    "--batch-size",
                    "8",
                    "--image-size",
                    "32",
                    "--classes",
                    "3",
                ])
                .args(["--local-threads", "1", "--ckpt-every", "2", "--ckpt-dir"])
                .arg(&ckpt)
                .arg("--keys-out")
                .arg(keys_out)
                .args(more)
                .env("OMP_NUM_THREADS", "1"),
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        println!("{stdout}");
        stdout + &String::from_utf8_lossy(&out.stderr)
    };
    // 64 samples, 2 ranks, batches of 8: 4 steps an epoch; stop after 2.
    run(&first, &["--max-steps", "2"]);
    let last = ckpt.join("last.ckpt");
    assert!(last.exists(), "no last.ckpt in {}", ckpt.display());
    let resumed = run(&second, &["--resume", last.to_str().unwrap()]);
    // Lightning calls the dataloader resumable (its `_Stateful` protocol)
    // and so does not warn that a mid-epoch resume may be unreliable.
    assert!(
        resumed.contains("Restored all states from the checkpoint") || resumed.contains("Restoring states"),
        "the run did not resume from the checkpoint: {resumed}"
    );
    assert!(!resumed.contains("not resumable"), "{resumed}");

    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut batches = Vec::new();
    for rank in 0..2 {
        let (a, na) = lightning_keys(&first, rank);
        let (b, nb) = lightning_keys(&second, rank);
        assert_eq!(na, 2, "rank {rank} trained 2 batches before the stop");
        batches.push(na + nb);
        for k in a.into_iter().chain(b) {
            *seen.entry(k).or_default() += 1;
        }
    }
    assert_eq!(batches[0], batches[1], "equal batch counts across ranks: {batches:?}");
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "trained on twice across the stop: {twice:?}");
    let got: std::collections::BTreeSet<&str> = seen.keys().map(String::as_str).collect();
    let expected: std::collections::BTreeSet<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(got, expected, "the stopped and the resumed run cover the epoch once");
}

#[test]
fn the_package_is_typed_with_stubs_generated_from_the_code_and_the_examples_pass_mypy_strict() {
    let root = repo_root();
    // transforms.pyi matches what the op schema and the module say now
    // (python::the_stubs_match_the_built_module_by_stubtest checks both
    // stubs against the built module).
    let out = run_ok(torch_python().arg(root.join("client/python/stubgen.py")).arg("--check"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("transforms.pyi matches the code"), "{stdout}");
    let examples = root.join("client/python/examples");
    let out = run_ok(
        torch_python()
            .args(["-m", "mypy", "--no-incremental", "--config-file"])
            .arg(examples.join("mypy.ini"))
            .arg(&examples),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Success: no issues found"), "{stdout}");
}

/// The op schema every op declares in Rust, and that the Python package,
/// the stubs and the docs are built from, against torchvision's own
/// classes: names, order, which are required, and defaults.
#[test]
fn every_op_schema_matches_its_torchvision_class() {
    let out = run_ok(torch_python().arg(python_script("schema_check.py")));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        stdout.contains("op schema: ") && stdout.contains("ops match torchvision"),
        "{stdout}"
    );
}

/// `from_torchvision` and the op classes against torchvision itself
/// (tests/python/transforms_check.py's torchvision part, which the main
/// test venv, without torch, cannot run): every op converted from v1 and
/// v2 objects, the recipes and policies, the refusals, MixUp and CutMix
/// against torchvision's with the same draws.
#[test]
fn transforms_convert_torchvision_objects_as_torchvision_defines_them() {
    let out = run_ok(
        torch_python()
            .arg(python_script("transforms_check.py"))
            .arg("--torchvision"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("op conversions (v1 and v2), refusals and MixUp/CutMix against torchvision ok")
            && stdout.contains("transforms check: all passed"),
        "{stdout}"
    );
}

/// Boxes and keypoints through every geometric op against torchvision
/// v2's own kernels, over random sizes, boxes, keypoints and arguments
/// (tests/python/targets_oracle.py): the coordinates a worker delivers
/// are torchvision's.
#[test]
fn boxes_and_keypoints_follow_every_geometric_op_as_torchvision_moves_them() {
    let out = run_ok(torch_python().arg(python_script("targets_oracle.py")).arg("600"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        stdout.contains("targets oracle: 600 draws") && stdout.contains("all within bounds"),
        "{stdout}"
    );
}

/// torchvision's five detection training recipes (references/detection's
/// presets, v2) convert op for op through from_torchvision
/// (tests/python/detection_recipes.py): lsj ends at its square, the others
/// keep each image's own size.
#[test]
fn the_detection_recipes_convert_from_torchvision() {
    let out = run_ok(torch_python().arg(python_script("detection_recipes.py")));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        stdout.contains("detection recipes: hflip, lsj, multiscale, ssd, ssdlite convert op for op"),
        "{stdout}"
    );
}

/// The five detection recipes, whole, through a worker against torchvision
/// on the same images and boxes (tests/python/detection_recipe_stats.py):
/// hflip's and multiscale's boxes equal torchvision's for the matched flip
/// draw; every recipe's kept fraction, box areas, centres and aspects have
/// torchvision's distributions (two-sample KS, alpha 1e-4); and the same
/// tests tell a changed ssd recipe from torchvision's own.
#[test]
fn the_detection_recipes_move_boxes_with_torchvisions_distributions() {
    let w = crate::support::Worker::start(2);
    let out = run_ok(
        torch_python()
            .arg(python_script("detection_recipe_stats.py"))
            .arg(&w.addr),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        stdout.contains("detection recipe statistics: hflip (384 samples")
            && stdout.contains("the same distributions as torchvision's")
            && stdout.contains("a changed ssd is caught"),
        "{stdout}"
    );
}
