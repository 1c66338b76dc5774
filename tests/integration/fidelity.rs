//! The `eval` transform against PIL's reference for the same photos.

use std::path::PathBuf;

use stoker_client::{Loader, LoaderConfig, TransformSpec};

use crate::support::{Worker, pack, python, python_script, repo_root, run_ok, synth_images};

/// Real photos from ../shared/photos when present, else procedural JPEGs.
fn photos(dir: &std::path::Path) -> (Vec<PathBuf>, &'static str) {
    let shared = repo_root().join("../shared/photos");
    let class = dir.join("photos");
    std::fs::create_dir_all(&class).unwrap();
    let mut found: Vec<PathBuf> = std::fs::read_dir(&shared)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    found.retain(|p| p.extension().is_some_and(|e| e == "jpg"));
    found.sort();
    if !found.is_empty() {
        let copied = found
            .iter()
            .map(|p| {
                let dst = class.join(p.file_name().unwrap());
                std::fs::copy(p, &dst).unwrap();
                dst
            })
            .collect();
        return (copied, "real photos from ../shared/photos");
    }
    synth_images(dir, 6, 1, 500, 375);
    std::fs::remove_dir_all(&class).unwrap();
    let procedural = dir.join("class_000");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&procedural)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    (files, "procedural JPEGs (../shared/photos not found)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_transform_is_within_3_of_pil() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let (files, source) = photos(&images);
    let shards = dir.path().join("shards");
    pack(&images, shards.to_str().unwrap(), "64M", &[]);

    let reference = dir.path().join("reference");
    std::fs::create_dir_all(&reference).unwrap();
    run_ok(
        python()
            .arg(python_script("pil_eval.py"))
            .arg("224")
            .arg(&reference)
            .args(&files),
    );

    let w = Worker::start(2);
    let config = LoaderConfig::new(
        vec![w.addr.clone()],
        shards.to_str().unwrap(),
        4,
        TransformSpec::eval(224),
    );
    let loader = Loader::connect(config).await.unwrap();
    let mut stream = loader.epoch(0).unwrap();
    let mut compared = 0;
    while let Some(batch) = stream.next_batch().await {
        let batch = batch.unwrap();
        for (i, key) in batch.keys.iter().enumerate() {
            let stem = key.rsplit('/').next().unwrap();
            let want = std::fs::read(reference.join(format!("{stem}.raw"))).unwrap();
            let got = batch.image(i);
            assert_eq!(got.len(), want.len());
            let mad = got
                .iter()
                .zip(&want)
                .map(|(&a, &b)| (i32::from(a) - i32::from(b)).unsigned_abs() as f64)
                .sum::<f64>()
                / got.len() as f64;
            println!("eval vs PIL, {key}: mean absolute difference {mad:.3} of 255 ({source})");
            assert!(mad < 3.0, "{key}: mean absolute difference {mad:.3} >= 3");
            compared += 1;
        }
    }
    assert_eq!(compared, files.len());
}
