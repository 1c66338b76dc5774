//! Corrupt, truncated and empty images are skipped, counted and named; the
//! rest of the epoch arrives intact.

use crate::support::{Worker, image_folder_keys, pack, stream, synth_images};

#[test]
fn bad_images_are_skipped_and_named_and_the_rest_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 30, 2, 128, 96);
    let good = image_folder_keys(&images);
    let class_dir = images.join("class_000");
    let a_good_jpeg = std::fs::read(class_dir.join("img_000000.jpg")).unwrap();
    std::fs::write(
        class_dir.join("zz_garbage.jpg"),
        b"this is not a jpeg at all, just text",
    )
    .unwrap();
    std::fs::write(
        class_dir.join("zz_truncated.jpg"),
        &a_good_jpeg[..a_good_jpeg.len() / 3],
    )
    .unwrap();
    std::fs::write(class_dir.join("zz_empty.jpg"), b"").unwrap();
    let shards = dir.path().join("shards");
    pack(&images, shards.to_str().unwrap(), "100K", &[]);

    let w = Worker::start(2);
    let run = stream(
        &[&w],
        shards.to_str().unwrap(),
        &["--batch-size", "7", "--image-size", "40"],
        &[],
    );
    assert!(run.success(), "{}", run.stderr());
    assert_eq!(run.num("samples"), 30);
    assert_eq!(run.num("skipped"), 3);
    let mut got: Vec<(String, i64)> = run.keys.iter().map(|(_, k, l)| (k.clone(), *l)).collect();
    got.sort();
    assert_eq!(got, good);
    let stderr = run.stderr();
    for key in ["class_000/zz_garbage", "class_000/zz_truncated", "class_000/zz_empty"] {
        assert!(stderr.contains(key), "{key} not named in:\n{stderr}");
    }

    // An error budget below the bad count fails the run and says why.
    let run = stream(
        &[&w],
        shards.to_str().unwrap(),
        &["--batch-size", "7", "--image-size", "40", "--max-errors", "1"],
        &[],
    );
    assert!(!run.success());
    assert!(run.stderr().contains("error budget"), "{}", run.stderr());
}
