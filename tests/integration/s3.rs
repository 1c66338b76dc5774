//! Streaming from a real S3-compatible server (s3s-fs), with shards from
//! three writers: `stoker pack`, GNU tar and Python's webdataset.TarWriter.

use std::process::Command;

use crate::support::{
    S3Server, assert_exactly_once, image_folder_keys, pack, python, python_script, run_ok, stream, synth_images,
};

#[test]
fn streams_shards_from_pack_gnu_tar_and_webdataset_over_s3() {
    let s3 = S3Server::start();
    let bucket = s3.bucket("data");
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 48, 3, 160, 120);
    let expected = image_folder_keys(&images);

    // 1. stoker pack, uploading through the S3 API.
    pack(&images, "s3://data/packed/", "150K", &s3.env());
    assert!(bucket.join("packed/stoker-index.json").exists());

    // 2. GNU tar: <class>/<stem>.jpg and <class>/<stem>.cls, two shards.
    let staging = dir.path().join("staging");
    let mut members = Vec::new();
    for (key, label) in &expected {
        let src = images.join(format!("{key}.jpg"));
        let dst = staging.join(format!("{key}.jpg"));
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(&src, &dst).unwrap();
        std::fs::write(staging.join(format!("{key}.cls")), label.to_string()).unwrap();
        members.push(format!("{key}.cls"));
        members.push(format!("{key}.jpg"));
    }
    let gnu = bucket.join("gnutar");
    std::fs::create_dir_all(&gnu).unwrap();
    for (i, half) in members.chunks(members.len() / 2).enumerate() {
        run_ok(
            Command::new("tar")
                .arg("--format=gnu")
                .arg("-cf")
                .arg(gnu.join(format!("part-{i}.tar")))
                .arg("-C")
                .arg(&staging)
                .args(half),
        );
    }

    // 3. webdataset.TarWriter, 20 samples per shard.
    run_ok(
        python()
            .arg(python_script("write_wds.py"))
            .arg(&images)
            .arg(bucket.join("wds"))
            .arg("20"),
    );

    let (w1, w2) = (s3.start_worker(1), s3.start_worker(1));
    for prefix in ["packed", "gnutar", "wds"] {
        let run = stream(
            &[&w1, &w2],
            &format!("s3://data/{prefix}/"),
            &["--batch-size", "10", "--image-size", "56", "--transform", "eval"],
            &[],
        );
        assert_exactly_once(&run, &expected, 0..1);
    }
}
