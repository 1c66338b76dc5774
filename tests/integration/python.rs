//! The `stoker` Python package (client/python, installed into the test
//! venv by scripts/test.sh) against real worker processes: the numpy path,
//! since the test venv has no torch.

use crate::support::{Worker, image_folder_keys, pack, python, python_script, run_ok, synth_images};

#[test]
fn the_python_package_streams_every_sample_once_with_numpy() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 90, 3, 96, 72);
    pack(&images, shards.to_str().unwrap(), "40K", &[]);
    let expected = image_folder_keys(&images);
    let tsv = dir.path().join("expected.tsv");
    let lines: String = expected.iter().map(|(k, l)| format!("{k}\t{l}\n")).collect();
    std::fs::write(&tsv, lines).unwrap();
    let (w1, w2) = (Worker::start(1), Worker::start(1));
    let out = run_ok(
        python()
            .arg(python_script("package_check.py"))
            .arg(format!("{},{}", w1.addr, w2.addr))
            .arg(&shards)
            .arg(&tsv)
            .arg("16"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        stdout.contains("python package: 90 samples x 2 epochs exactly once"),
        "{stdout}"
    );
}

#[test]
fn the_python_package_raises_past_the_error_budget_and_pads_within_it() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 20, 2, 64, 48);
    // One image that is not a JPEG at all, under a name that says it is.
    std::fs::write(images.join("class_001/zz_broken.jpg"), b"this is not a jpeg").unwrap();
    pack(&images, shards.to_str().unwrap(), "1M", &[]);
    let w = Worker::start(1);
    let script = r#"
import sys, stoker
def run(budget):
    loader = stoker.Loader(workers=sys.argv[1], dataset=sys.argv[2], batch_size=4, image_size=32,
                           max_errors=budget, last_batch="partial")
    real = padded = batches = 0
    for b in loader:
        batches += 1
        padded += b["padded"]
        real += len(b["key"]) - b["padded"]
    return f"batches {batches} of {len(loader)}, real {real}, padded {padded}"
try:
    run(0)
except stoker.StokerError as e:
    print("budget 0:", e)
else:
    print("budget 0: no error")
print("budget 1:", run(1))
"#;
    let out = run_ok(python().arg("-c").arg(script).arg(&w.addr).arg(&shards));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        stdout.contains("budget 0: error budget exceeded") && stdout.contains("class_001/zz_broken"),
        "{stdout}"
    );
    // 21 samples, one skipped: still the 6 batches the index says; the
    // last one, left with no real sample, is made up of padding.
    assert!(
        stdout.contains("budget 1: batches 6 of 6, real 20, padded 4"),
        "{stdout}"
    );
}
