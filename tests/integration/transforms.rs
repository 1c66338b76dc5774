//! The transform ops against their reference (torchvision on PIL images,
//! reproduced with PIL), and the spec's interfaces (CLI, JSON, errors).

use crate::support::{python, python_script, stoker_bin};

/// Every op, with fixed parameters (p=1, degenerate ranges, every
/// interpolation, padding mode and fill), run by `stoker augment` and by
/// tests/python/transform_oracle.py's reproduction of torchvision's PIL path
/// on the same lossless PNGs: exact where PIL's arithmetic is integer-exact,
/// within the bound its table documents elsewhere. Random ops are checked
/// against every outcome torchvision could draw, for determinism, and for
/// how often they change the image. The same script runs against
/// torchvision itself on the GPU machine (`--oracle torchvision`).
#[test]
fn every_op_matches_its_torchvision_reference_on_pil() {
    let dir = tempfile::tempdir().unwrap();
    let out = python()
        .arg(python_script("transform_oracle.py"))
        .args(["--oracle", "pil"])
        .arg(stoker_bin())
        .arg(dir.path())
        .output()
        .expect("run transform_oracle.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    if !stderr.is_empty() {
        eprintln!("{stderr}");
    }
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("transform oracle: ") && l.contains(" cases"))
        .unwrap_or("(no summary line)");
    assert!(
        out.status.success() && summary.contains("all within bounds"),
        "transform oracle failed ({}): {summary}\n(the per-case lines are above; rerun one with \
         `python3 tests/python/transform_oracle.py --only REGEX target/release/stoker /tmp/oracle`)",
        out.status
    );
}
