//! Corrupt, truncated, empty, oversized and hostile input is skipped, counted
//! and named with its reason; the rest of the epoch arrives exactly once, and
//! the worker neither crashes nor spends memory on it.

use std::io::Read;
use std::path::Path;

use stoker_formats::tar::append_member;
use stoker_image::decode::{ImageKind, header_dimensions};

use crate::support::{
    StreamChild, Worker, assert_exactly_once, image_folder_keys, pack, peak_rss, signal, stoker_bin, stream,
    synth_images,
};

#[test]
fn bad_images_are_skipped_and_named_and_the_rest_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 30, 2, 128, 96);
    let good = image_folder_keys(&images);
    let class_dir = images.join("class_000");
    let a_good_jpeg = std::fs::read(class_dir.join("img_000000.jpg")).unwrap();
    // A JPEG's magic bytes and then text, and a JPEG cut in its scans:
    // packed, and flagged by pack; skipped by the workers. An empty file
    // is no image: pack leaves it out and says so.
    std::fs::write(
        class_dir.join("zz_garbage.jpg"),
        b"\xff\xd8\xff this is not a jpeg at all, just text",
    )
    .unwrap();
    std::fs::write(
        class_dir.join("zz_truncated.jpg"),
        &a_good_jpeg[..a_good_jpeg.len() / 3],
    )
    .unwrap();
    std::fs::write(class_dir.join("zz_empty.jpg"), b"").unwrap();
    let shards = dir.path().join("shards");
    let packed = pack(&images, shards.to_str().unwrap(), "100K", &[]);
    let said = String::from_utf8_lossy(&packed.stderr);
    assert!(
        said.contains("left out 1 file(s) of the input: 1 empty file") && said.contains("zz_empty.jpg: empty file"),
        "{said}"
    );
    assert!(
        said.contains("packed, but workers will skip 2 file(s)") && said.contains("zz_truncated.jpg: truncated jpeg"),
        "{said}"
    );

    let w = Worker::start(2);
    let run = stream(
        &[&w],
        shards.to_str().unwrap(),
        &["--batch-size", "7", "--image-size", "40"],
        &[],
    );
    assert!(run.success(), "{}", run.stderr());
    assert_eq!(run.num("samples"), 30);
    assert_eq!(run.num("skipped"), 2);
    let mut got: Vec<(String, i64)> = run.keys.iter().map(|(_, k, l)| (k.clone(), *l)).collect();
    got.sort();
    assert_eq!(got, good);
    let stderr = run.stderr();
    for key in ["class_000/zz_garbage", "class_000/zz_truncated"] {
        assert!(stderr.contains(key), "{key} not named in:\n{stderr}");
    }
    // The worker told the client what pack reported, once.
    assert_eq!(
        stderr.matches("stoker pack left out 1 file(s) of the input").count(),
        1,
        "{stderr}"
    );

    // An error budget below the bad count fails the run and says why.
    let run = stream(
        &[&w],
        shards.to_str().unwrap(),
        &["--batch-size", "7", "--image-size", "40", "--max-errors", "1"],
        &[],
    );
    assert!(!run.success());
    let stderr = run.stderr();
    // It says how many were skipped, and for what, grouped by kind.
    assert!(stderr.contains("error budget exceeded: 2 samples"), "{stderr}");
    assert!(stderr.contains("first: class_000/zz_"), "{stderr}");

    // As a fraction of the epoch (32 samples in the index): 2 skips are
    // 6%, over 5%, within 10%.
    let args = |budget| ["--batch-size", "7", "--image-size", "40", "--max-errors", budget];
    let run = stream(&[&w], shards.to_str().unwrap(), &args("5%"), &[]);
    assert!(!run.success(), "2 of 32 skipped passed a 5% budget");
    assert!(run.stderr().contains("more than 5% allows"), "{}", run.stderr());
    let run = stream(&[&w], shards.to_str().unwrap(), &args("0.1"), &[]);
    assert!(run.success(), "2 of 32 skipped failed a 10% budget: {}", run.stderr());
    assert_eq!(run.num("skipped"), 2);
}

/// A 16x8 PNG, the seed of the formats crate's tests and fuzz corpus.
const TINY_PNG: &[u8] = include_bytes!("../../worker/formats/testdata/tiny.png");

/// A tar member: path and data.
type Member = (String, Vec<u8>);

/// A tar of `members` as `stoker pack` writes them, with its two end blocks.
fn tar(members: &[Member]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data) in members {
        append_member(&mut out, name, data);
    }
    out.resize(out.len() + 1024, 0);
    out
}

/// The members of a sample: `<key>.<ext>` with the image and `<key>.cls`.
fn sample(key: &str, ext: &str, image: &[u8], cls: &[u8]) -> [Member; 2] {
    [
        (format!("{key}.{ext}"), image.to_vec()),
        (format!("{key}.cls"), cls.to_vec()),
    ]
}

/// `n` distinct small JPEGs from `stoker synth`.
fn jpegs(dir: &Path, n: usize) -> Vec<Vec<u8>> {
    synth_images(dir, n, 1, 64, 48);
    let mut files: Vec<_> = std::fs::read_dir(dir.join("class_000"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// `jpeg` with the width and height of its frame header replaced, found by
/// walking the marker segments.
fn with_frame_size(jpeg: &[u8], width: u16, height: u16) -> Vec<u8> {
    let mut out = jpeg.to_vec();
    let mut i = 2;
    loop {
        assert_eq!(out[i], 0xff, "marker expected at byte {i}");
        let marker = out[i + 1];
        if (0xc0..=0xcf).contains(&marker) && !matches!(marker, 0xc4 | 0xc8 | 0xcc) {
            out[i + 5..i + 7].copy_from_slice(&height.to_be_bytes());
            out[i + 7..i + 9].copy_from_slice(&width.to_be_bytes());
            return out;
        }
        i += 2 + usize::from(u16::from_be_bytes([out[i + 2], out[i + 3]]));
    }
}

/// Asserts that some line of `stderr` names `key` together with `reason`.
fn assert_named(stderr: &str, key: &str, reason: &str) {
    assert!(
        stderr.lines().any(|l| l.contains(key) && l.contains(reason)),
        "{key} not named with {reason:?} in:\n{stderr}"
    );
}

#[test]
fn hostile_members_are_skipped_with_their_reason_and_cost_no_memory() {
    let dir = tempfile::tempdir().unwrap();
    let good = jpegs(&dir.path().join("images"), 13);
    let pad_to = |data: &[u8], len: usize| {
        let mut v = data.to_vec();
        v.resize(len, 0);
        v
    };

    // Headers claiming 60000x60000: 10.8 GB of RGB if anything believed them.
    let jpeg_bomb = with_frame_size(&good[12], 60000, 60000);
    assert_eq!(header_dimensions(ImageKind::Jpeg, &jpeg_bomb), Ok((60000, 60000)));
    let mut png_bomb = TINY_PNG.to_vec();
    png_bomb[16..24].copy_from_slice(&[60000u32.to_be_bytes(), 60000u32.to_be_bytes()].concat());
    assert_eq!(header_dimensions(ImageKind::Png, &png_bomb), Ok((60000, 60000)));
    // An executable and a zip archive named .jpg.
    let mut elf = vec![0; 4096];
    std::fs::File::open(stoker_bin()).unwrap().read_exact(&mut elf).unwrap();
    assert!(elf.starts_with(b"\x7fELF"));
    let mut zip = b"PK\x03\x04\x14\x00\x00\x00\x08\x00".to_vec();
    zip.resize(300, 0x5a);

    // (key, members, the reason the worker gives).
    let bad: Vec<(&str, Vec<Member>, &str)> = vec![
        (
            "hostile/empty-jpg",
            sample("hostile/empty-jpg", "jpg", b"", b"1").into(),
            "jpg member is empty",
        ),
        (
            "hostile/empty-cls",
            sample("hostile/empty-cls", "jpg", &good[0], b"").into(),
            "cls member is empty",
        ),
        (
            // A decodable JPEG, padded past --max-member-bytes 64K.
            "hostile/oversized",
            sample("hostile/oversized", "jpg", &pad_to(&good[1], 100_000), b"1").into(),
            "jpg member of 100000 bytes exceeds the member size limit of 65536 bytes",
        ),
        (
            "hostile/bomb-jpeg",
            sample("hostile/bomb-jpeg", "jpg", &jpeg_bomb, b"1").into(),
            "image of 60000x60000 exceeds the limit of 100000000 pixels",
        ),
        (
            "hostile/bomb-png",
            sample("hostile/bomb-png", "png", &png_bomb, b"1").into(),
            "image of 60000x60000 exceeds the limit of 100000000 pixels",
        ),
        (
            "hostile/elf",
            sample("hostile/elf", "jpg", &elf, b"1").into(),
            "no frame header found",
        ),
        (
            "hostile/zip",
            sample("hostile/zip", "jpg", &zip, b"1").into(),
            "no frame header found",
        ),
    ];

    // Two shards, good and bad samples interleaved.
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    let mut expected = Vec::new();
    let mut members: [Vec<Member>; 2] = Default::default();
    for (i, jpeg) in good[..12].iter().enumerate() {
        let key = format!("good/{i:02}");
        members[i % 2].extend(sample(&key, "jpg", jpeg, format!("{}\n", i % 3).as_bytes()));
        expected.push((key, (i % 3) as i64));
        if let Some((_, bad_members, _)) = bad.get(i) {
            members[i % 2].extend(bad_members.iter().cloned());
        }
    }
    expected.sort();
    for (i, m) in members.iter().enumerate() {
        std::fs::write(shards.join(format!("shard-{i:06}.tar")), tar(m)).unwrap();
    }

    let w = Worker::start_with(2, &["--max-member-bytes", "64K"], &[]);
    let run = stream(
        &[&w],
        shards.to_str().unwrap(),
        &["--batch-size", "5", "--image-size", "32"],
        &[],
    );
    assert_exactly_once(&run, &expected, 0..1);
    assert_eq!(run.num("skipped"), bad.len() as u64, "{}", run.stderr());
    let stderr = run.stderr();
    for (key, _, reason) in &bad {
        assert_named(&stderr, key, reason);
    }
    let peak = peak_rss(w.child.0.id());
    assert!(peak < 300 << 20, "worker peak RSS {} MiB", peak >> 20);
}

#[test]
fn truncated_shards_deliver_what_came_before_and_name_the_shard() {
    let dir = tempfile::tempdir().unwrap();
    let good = jpegs(&dir.path().join("images"), 12);
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    let mut expected = Vec::new();
    let mut shard = |name: &str, keys: std::ops::Range<usize>, delivered: usize| {
        let members: Vec<_> = keys
            .clone()
            .flat_map(|i| sample(&format!("{name}/{i:02}"), "jpg", &good[i], b"4"))
            .collect();
        expected.extend(keys.take(delivered).map(|i| (format!("{name}/{i:02}"), 4)));
        tar(&members)
    };

    // Whole.
    let whole = shard("whole", 0..4, 4);
    std::fs::write(shards.join("shard-000000.tar"), whole).unwrap();
    // Cut in the middle of the image of the last sample: the four before
    // it arrive.
    let mid_member = shard("mid-member", 4..9, 4);
    let last_jpeg = mid_member.len() - 1024 - 1024 - 512 - good[8].len().div_ceil(512) * 512;
    std::fs::write(
        shards.join("shard-000001.tar"),
        &mid_member[..last_jpeg + 512 + good[8].len() / 2],
    )
    .unwrap();
    // Cut in the middle of the header of the last sample's label: that
    // sample is not delivered without it (its image was read, but a label
    // of -1 would be wrong); the ones before it are.
    let mid_header = shard("mid-header", 9..12, 2);
    let cut = mid_header.len() - 1024 - 512 - 300;
    std::fs::write(shards.join("shard-000002.tar"), &mid_header[..cut]).unwrap();
    expected.sort();

    let w = Worker::start(2);
    let run = stream(
        &[&w],
        shards.to_str().unwrap(),
        &["--batch-size", "4", "--image-size", "32"],
        &[],
    );
    assert_exactly_once(&run, &expected, 0..1);
    assert_eq!(run.num("skipped"), 0);
    let json = run.json.as_ref().unwrap();
    let mut errors: Vec<&str> = json["shard_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    errors.sort();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].contains("shard-000001.tar") && errors[0].contains("tar truncated at byte"),
        "{errors:?}"
    );
    assert!(
        errors[1].contains("shard-000002.tar") && errors[1].contains("truncated"),
        "{errors:?}"
    );
    let stderr = run.stderr();
    assert!(stderr.contains("shard-000001.tar"), "{stderr}");
    assert!(stderr.contains("shard-000002.tar"), "{stderr}");
}

/// One sample per key in `keys`, in that order, each with its own JPEG
/// and label (`labels[i]`): a WebDataset shard whose keys may repeat.
fn shard_of(keys: &[String], labels: &[i64], jpeg: &[u8]) -> Vec<u8> {
    let members: Vec<Member> = keys
        .iter()
        .zip(labels)
        .flat_map(|(key, label)| sample(key, "jpg", jpeg, label.to_string().as_bytes()))
        .collect();
    tar(&members)
}

#[test]
fn resize_bombs_are_skipped_as_too_large_before_any_allocation() {
    // 65000x1 and 1x65000: tiny files, far under the pixel limit, but
    // `eval` resizes the shorter side to 256, which makes 16.6 M x 256.
    use stoker_synth::{encode_jpeg, procedural};
    let dir = tempfile::tempdir().unwrap();
    let good = jpegs(&dir.path().join("images"), 24);
    let wide = encode_jpeg(&procedural(65000, 1, 1), 90).unwrap();
    let tall = encode_jpeg(&procedural(1, 65000, 2), 90).unwrap();
    let mut members: Vec<Member> = Vec::new();
    for (i, jpeg) in good.iter().enumerate() {
        members.extend(sample(&format!("ok{i:02}"), "jpg", jpeg, b"1"));
        if i == 8 {
            members.extend(sample("bomb_wide", "jpg", &wide, b"1"));
        }
        if i == 16 {
            members.extend(sample("bomb_tall", "jpg", &tall, b"1"));
        }
    }
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    std::fs::write(shards.join("bombs-000000.tar"), tar(&members)).unwrap();

    let w = Worker::start_with(2, &["--memory-limit", "1G"], &[]);
    let started = std::time::Instant::now();
    let run = stream(
        &[&w],
        shards.to_str().unwrap(),
        &["--batch-size", "5", "--transform", "eval", "--image-size", "224"],
        &[],
    );
    let seconds = started.elapsed().as_secs_f64();
    assert!(run.success(), "{}", run.stderr());
    assert_eq!(run.num("samples"), 24);
    assert_eq!(run.num("skipped"), 2);
    let stderr = run.stderr();
    assert_named(&stderr, "bomb_wide", "(Resize) would make a 16640000x256 image");
    assert_named(&stderr, "bomb_tall", "(Resize) would make a 256x16640000 image");
    let peak = peak_rss(w.child.0.id());
    println!(
        "two resize bombs under eval: {seconds:.1}s, worker peak RSS {} MiB",
        peak >> 20
    );
    assert!(peak < 1536 << 20, "worker peak RSS {} MiB", peak >> 20);
    assert!(seconds < 60.0, "the epoch took {seconds:.1}s");
    // The worker serves on; under `train`, which crops first, the two
    // thin images are small work and arrive too.
    let again = stream(
        &[&w],
        shards.to_str().unwrap(),
        &["--batch-size", "5", "--image-size", "64"],
        &[],
    );
    assert!(again.success(), "{}", again.stderr());
    assert_eq!(again.num("samples"), 26);
}

#[test]
fn repeated_keys_each_arrive_exactly_once_through_a_worker_kill() {
    // Six shards merged from several sources: each repeats its first 20
    // keys, not consecutively, and every shard uses the same key names.
    // Labels tell the samples apart: (shard, position) is the identity.
    let dir = tempfile::tempdir().unwrap();
    let jpeg = jpegs(&dir.path().join("images"), 1).remove(0);
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    let mut expected: Vec<(String, i64)> = Vec::new();
    // 400 samples a shard: enough that the killed worker is still busy
    // with its share when it is killed, also on a loaded machine.
    for s in 0..6i64 {
        let keys: Vec<String> = (0..400).map(|i| format!("k{:03}", i % 20)).collect();
        let labels: Vec<i64> = (0..400).map(|i| s * 1000 + i).collect();
        std::fs::write(
            shards.join(format!("merged-{s:06}.tar")),
            shard_of(&keys, &labels, &jpeg),
        )
        .unwrap();
        expected.extend(keys.into_iter().zip(labels));
    }
    expected.sort();

    let small_chunks = ["--chunk-bytes", "8K"];
    // The killed worker is slow, so it is mid-item when it is killed.
    let (w1, w2) = (
        Worker::start_with(1, &small_chunks, &crate::support::SLOW_SAMPLES),
        Worker::start_with(1, &small_chunks, &[]),
    );
    let mut run = StreamChild::spawn(
        &[&w1, &w2],
        shards.to_str().unwrap(),
        &[
            "--batch-size",
            "4",
            "--image-size",
            "32",
            "--prefetch",
            "1",
            "--epochs",
            "2",
        ],
    );
    run.wait_for_samples(8, std::time::Duration::from_secs(30));
    signal(w1.child.0.id(), "-KILL");
    let run = run.finish();
    // Each (key, label) once per epoch: 2,400 samples under 20 key names.
    assert_exactly_once(&run, &expected, 0..2);
    assert!(
        run.num("retries") >= 1,
        "the killed worker's items were never reassigned"
    );
    assert_eq!(run.num("skipped"), 0);
    for epoch in 0..2 {
        let mut per_key = std::collections::BTreeMap::<&str, usize>::new();
        for (_, key, _) in run.keys.iter().filter(|(e, _, _)| *e == epoch) {
            *per_key.entry(key.as_str()).or_default() += 1;
        }
        assert_eq!(per_key.len(), 20);
        assert!(per_key.values().all(|&n| n == 120), "epoch {epoch}: {per_key:?}");
    }
}
