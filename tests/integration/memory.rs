//! A worker streams a shard larger than its memory limit and its peak
//! resident memory stays under the limit; a Parquet row group larger than
//! its whole memory budget is never fetched: it is the shard's error,
//! naming the row group.

use std::io::Write;

use stoker_formats::tar::{file_header, padding};

use crate::formats::write_parquet;
use crate::support::{Worker, assert_exactly_once, image_folder_keys, peak_rss, stream, synth_images};

#[test]
fn a_shard_larger_than_the_memory_limit_streams_under_it() {
    const LIMIT: u64 = 96 << 20;
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 8, 1, 1600, 1200);
    let jpegs: Vec<Vec<u8>> = std::fs::read_dir(images.join("class_000"))
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();

    // One shard of large JPEGs (the 8 photos under many keys) past 1.25x
    // the limit.
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    let mut tar = std::io::BufWriter::new(std::fs::File::create(shards.join("big-000000.tar")).unwrap());
    let (mut written, mut n) = (0u64, 0usize);
    while written < LIMIT * 5 / 4 {
        let jpeg = &jpegs[n % jpegs.len()];
        for (name, data) in [
            (format!("s{n:05}.jpg"), jpeg.as_slice()),
            (format!("s{n:05}.cls"), b"0".as_slice()),
        ] {
            tar.write_all(&file_header(&name, data.len() as u64, 0)).unwrap();
            tar.write_all(data).unwrap();
            tar.write_all(&vec![0; padding(data.len() as u64) as usize]).unwrap();
            written += data.len() as u64 + 512;
        }
        n += 1;
    }
    tar.write_all(&[0; 1024]).unwrap();
    tar.into_inner().unwrap().sync_all().unwrap();

    let w = Worker::start_with(2, &["--memory-limit", "96M"], &[]);
    let run = stream(
        &[&w],
        shards.to_str().unwrap(),
        &["--batch-size", "16", "--image-size", "224", "--prefetch", "1"],
        &[],
    );
    assert!(run.success(), "{}", run.stderr());
    assert_eq!(run.num("samples"), n as u64);
    assert_eq!(run.num("skipped"), 0);
    let peak = peak_rss(w.child.0.id());
    println!(
        "shard of {} MiB ({n} samples) through a worker limited to {} MiB: peak RSS {} MiB",
        written >> 20,
        LIMIT >> 20,
        peak >> 20
    );
    assert!(
        peak < LIMIT,
        "worker peaked at {} MiB, over its limit of {} MiB",
        peak >> 20,
        LIMIT >> 20
    );
}

#[test]
fn a_parquet_row_group_larger_than_the_memory_budget_is_a_shard_error_naming_it() {
    // The smallest limit: 80 MiB, a budget of 32 MiB for sample data.
    const BUDGET: u64 = 32 << 20;
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 4, 1, 1600, 1200);
    // The photos copied under more names, to 20 MiB of JPEG: a row group
    // of all of them needs that fetched and as much again decoded.
    let class = images.join("class_000");
    let photos: Vec<Vec<u8>> = std::fs::read_dir(&class)
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    let (mut total, mut n) = (photos.iter().map(|p| p.len() as u64).sum::<u64>(), 0);
    while total < 20 << 20 {
        let photo = &photos[n % photos.len()];
        std::fs::write(class.join(format!("copy_{n:04}.jpg")), photo).unwrap();
        total += photo.len() as u64;
        n += 1;
    }
    let expected = image_folder_keys(&images);
    let big = dir.path().join("big");
    let shards = write_parquet(&images, &big, 1, 10_000, &[]);
    assert_eq!(shards[0].group_rows, [expected.len() as u64], "one row group");
    assert!(shards[0].group_bytes[0] > BUDGET / 2);

    let mut w = Worker::start_with(2, &["--memory-limit", "80M"], &[]);
    let args = ["--batch-size", "4", "--image-size", "64"];
    let run = stream(&[&w], big.to_str().unwrap(), &args, &[]);
    assert!(run.success(), "{}", run.stderr());
    assert_eq!(run.num("samples"), 0);
    let json = run.json.as_ref().unwrap();
    let errors = json["shard_errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let error = errors[0].as_str().unwrap();
    assert!(
        error.contains("train-0.parquet")
            && error.contains("row group 0 needs")
            && error.contains(&format!("more than the worker's whole memory budget of {BUDGET} bytes")),
        "{error}"
    );
    assert!(w.child.0.try_wait().unwrap().is_none(), "the worker exited");

    // The same images in row groups of 4 fit: every one arrives.
    let small = dir.path().join("small");
    write_parquet(&images, &small, 1, 4, &[]);
    let run = stream(&[&w], small.to_str().unwrap(), &args, &[]);
    assert_exactly_once(&run, &expected, 0..1);
    let peak = peak_rss(w.child.0.id());
    println!(
        "parquet through a worker limited to 80 MiB: peak RSS {} MiB",
        peak >> 20
    );
    assert!(
        peak < 80 << 20,
        "worker peaked at {} MiB, over its limit of 80 MiB",
        peak >> 20
    );
}
