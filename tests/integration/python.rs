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
