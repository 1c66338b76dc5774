//! A worker streams a shard larger than its memory limit and its peak
//! resident memory stays under the limit.

use std::io::Write;

use stoker_server::wds::{file_header, padding};

use crate::support::{Worker, peak_rss, stream, synth_images};

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
