//! Wrong datasets, credentials, workers and arguments: one line naming the
//! cause and the object, a non-zero exit, and no secrets in the output.

use crate::support::{S3Server, Worker, free_port, stoker, stream};

/// Asserts a failed run whose stderr is one line mentioning every needle.
fn assert_one_line_error(stderr: &str, ok: bool, needles: &[&str]) {
    assert!(!ok, "expected failure, stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line, got:\n{stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    for n in needles {
        assert!(lines[0].contains(n), "{n:?} not in {:?}", lines[0]);
    }
}

const ARGS: &[&str] = &["--batch-size", "4", "--image-size", "32"];

#[test]
fn missing_folder_and_empty_dataset() {
    let w = Worker::start(1);
    let run = stream(&[&w], "/nonexistent/stoker-data", ARGS, &[]);
    assert_one_line_error(
        &run.stderr(),
        run.success(),
        &["/nonexistent/stoker-data", "does not exist", &w.addr],
    );

    let empty = tempfile::tempdir().unwrap();
    std::fs::write(empty.path().join("notes.txt"), b"no shards here").unwrap();
    let run = stream(&[&w], empty.path().to_str().unwrap(), ARGS, &[]);
    assert_one_line_error(
        &run.stderr(),
        run.success(),
        &["no shards", empty.path().to_str().unwrap()],
    );

    // An image folder that was never packed: say so, and how to pack it.
    let images = tempfile::tempdir().unwrap();
    std::fs::create_dir(images.path().join("cat")).unwrap();
    std::fs::write(images.path().join("cat/1.jpg"), b"not decoded").unwrap();
    let run = stream(&[&w], images.path().to_str().unwrap(), ARGS, &[]);
    assert_one_line_error(
        &run.stderr(),
        run.success(),
        &["no shards", "holds 1 image file(s)", "stoker pack --input"],
    );
}

/// `stoker pack` on a flat folder of images, or an empty one: one line
/// saying the layout it expects and how to pack a flat folder.
#[test]
fn pack_names_the_layout_it_expects() {
    let flat = tempfile::tempdir().unwrap();
    for i in 0..3 {
        std::fs::write(flat.path().join(format!("{i}.jpg")), b"not decoded").unwrap();
    }
    let empty = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    for (input, needles) in [
        (flat.path(), &["holds 3 image(s) but no class subfolders", "mkdir"][..]),
        (empty.path(), &["is empty", "one subfolder per class"][..]),
    ] {
        let run = stoker()
            .args(["pack", "--input", input.to_str().unwrap(), "--output"])
            .arg(out.path().join("shards"))
            .output()
            .unwrap();
        let mut needles = needles.to_vec();
        let path = input.display().to_string();
        needles.push(&path);
        assert_one_line_error(&String::from_utf8_lossy(&run.stderr), run.status.success(), &needles);
    }
}

/// `stoker pack --strict` refuses a folder holding a file that is no image
/// or an image workers would skip, naming each, and writes nothing.
#[test]
fn pack_strict_refuses_bad_files_and_writes_nothing() {
    let images = tempfile::tempdir().unwrap();
    crate::support::synth_images(images.path(), 4, 2, 64, 48);
    std::fs::write(images.path().join("class_000/zz_empty.jpg"), b"").unwrap();
    std::fs::write(images.path().join("class_001/notes.txt"), b"notes").unwrap();
    let out = tempfile::tempdir().unwrap();
    let shards = out.path().join("shards");
    let run = stoker()
        .args([
            "pack",
            "--strict",
            "--input",
            images.path().to_str().unwrap(),
            "--output",
        ])
        .arg(&shards)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    for needle in [
        "--strict",
        "nothing was written",
        "left out 2 file(s) of the input: 1 empty file, 1 not an image file name",
        "zz_empty.jpg: empty file",
        "notes.txt: not an image file name",
    ] {
        assert!(stderr.contains(needle), "{needle:?} not in:\n{stderr}");
    }
    assert!(!shards.join("stoker-index.json").exists());
}

#[test]
fn missing_bucket_missing_prefix_and_bad_credentials() {
    let s3 = S3Server::start();
    s3.bucket("data");
    let w = s3.start_worker(1);
    let run = stream(&[&w], "s3://no-such-bucket/train/", ARGS, &[]);
    assert_one_line_error(&run.stderr(), run.success(), &["no-such-bucket", "does not exist"]);

    let run = stream(&[&w], "s3://data/nothing-here/", ARGS, &[]);
    assert_one_line_error(&run.stderr(), run.success(), &["no shards", "s3://data/nothing-here/"]);

    let wrong_secret = "definitely-wrong-secret-value";
    let mut env = s3.env();
    env.retain(|(k, _)| *k != "AWS_SECRET_ACCESS_KEY");
    env.push(("AWS_SECRET_ACCESS_KEY", wrong_secret.to_owned()));
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let bad = Worker::start_with_env(1, &pairs);
    let run = stream(&[&bad], "s3://data/train/", ARGS, &[]);
    let stderr = run.stderr();
    assert_one_line_error(&stderr, run.success(), &["denied", "s3://data/train/"]);
    assert!(!stderr.contains(wrong_secret), "secret leaked: {stderr}");
}

#[test]
fn unreachable_worker() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let out = stoker()
        .args([
            "stream",
            "--workers",
            &addr,
            "--dataset",
            "/tmp",
            "--batch-size",
            "4",
            "--image-size",
            "32",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_one_line_error(&stderr, out.status.success(), &["no worker reachable", &addr]);
}

#[test]
fn invalid_arguments_are_refused() {
    for (args, needle) in [
        (["--batch-size", "0", "--image-size", "32"], "--batch-size"),
        (["--batch-size", "4", "--image-size", "0"], "--image-size"),
    ] {
        let out = stoker()
            .args(["stream", "--workers", "127.0.0.1:1", "--dataset", "/tmp"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_one_line_error(&stderr, out.status.success(), &[needle]);
    }
    let out = stoker()
        .args([
            "stream",
            "--workers",
            "127.0.0.1:1",
            "--dataset",
            "/tmp",
            "--batch-size",
            "4",
        ])
        .args(["--image-size", "32", "--transform", "sparkle"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("sparkle"));
}

#[test]
fn a_worker_with_a_token_refuses_clients_without_it_and_never_logs_it() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    crate::support::synth_images(&images, 6, 2, 64, 48);
    crate::support::pack(&images, shards.to_str().unwrap(), "1M", &[]);
    let dataset = shards.to_str().unwrap();
    let token = "s3cret-token-value";
    let log = dir.path().join("worker.log");
    // The most verbose log the worker writes, to a file we can search.
    let w = Worker::start_logging_to(1, &[], &[("STOKER_TOKEN", token), ("STOKER_LOG", "trace")], &log);

    let run = stream(&[&w], dataset, ARGS, &[]);
    assert_one_line_error(&run.stderr(), run.success(), &["unauthenticated", &w.addr]);

    let run = stream(
        &[&w],
        dataset,
        ARGS,
        &[("STOKER_TOKEN", "wrong-token-value".to_owned())],
    );
    let stderr = run.stderr();
    assert_one_line_error(&stderr, run.success(), &["unauthenticated"]);
    assert!(
        !stderr.contains("wrong-token-value") && !stderr.contains(token),
        "token leaked: {stderr}"
    );

    let run = stream(
        &[&w],
        dataset,
        ARGS,
        &[("STOKER_TOKEN", token.to_owned()), ("STOKER_LOG", "trace".to_owned())],
    );
    assert!(run.success(), "{}", run.stderr());
    assert_eq!(run.num("samples"), 6);
    assert!(!run.stderr().contains(token), "the client logged the token");
    let worker_log = std::fs::read_to_string(&log).unwrap();
    assert!(worker_log.contains("worker ready"), "no worker log: {worker_log}");
    for secret in [token, "wrong-token-value"] {
        assert!(!worker_log.contains(secret), "the worker logged a token");
    }
}

#[test]
fn augment_writes_the_format_its_output_names_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    crate::support::synth_images(&images, 1, 1, 96, 72);
    let input = std::fs::read_dir(images.join("class_000"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    for (name, magic) in [("out.png", &b"\x89PNG"[..]), ("out.JPG", &b"\xff\xd8\xff"[..])] {
        let output = dir.path().join(name);
        let run = crate::support::stoker()
            .args(["augment", "--transform", "train", "--image-size", "48"])
            .arg("--input")
            .arg(&input)
            .arg("--output")
            .arg(&output)
            .output()
            .unwrap();
        assert!(run.status.success(), "{run:?}");
        assert!(
            std::fs::read(&output).unwrap().starts_with(magic),
            "{name} is not in its format"
        );
        let said = String::from_utf8_lossy(&run.stderr);
        assert!(
            said.contains(&format!("wrote {}", output.display())) && said.contains("48x48"),
            "{said}"
        );
        // The draws it made: the crop and the flip of this sample.
        let draws = String::from_utf8_lossy(&run.stdout);
        assert!(
            draws.contains("draws for seed 0 epoch 0")
                && draws.contains("at 96x72")
                && draws.contains("step 0: CropResize"),
            "{draws}"
        );
    }
    let unknown = dir.path().join("out.bmp");
    let run = crate::support::stoker()
        .args(["augment", "--transform", "train", "--image-size", "48"])
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(&unknown)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(said.contains("use .png or .jpg") && !unknown.exists(), "{said}");
}
