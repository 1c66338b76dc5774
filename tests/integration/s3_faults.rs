//! S3 trouble against the real server (s3s-fs): a server paused mid-epoch,
//! shard bodies cut mid-read by a proxy, and permanent errors (a missing
//! shard, refused credentials) that must fail fast without a retry storm.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{
    ChildGuard, S3Server, Worker, assert_exactly_once, image_folder_keys, pack, signal, stoker, stream, synth_images,
};

use crate::faultproxy::FaultProxy;

/// A worker like `Worker::start_with`, but logging at `warn` to `log`.
fn logged_worker(threads: usize, args: &[&str], env: &[(&'static str, String)], log: &Path) -> Worker {
    let mut cmd = stoker();
    cmd.args(["worker", "--listen", "127.0.0.1:0", "--threads", &threads.to_string()])
        .args(args)
        .env("STOKER_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(File::create(log).unwrap()));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn stoker worker");
    let stdout = child.stdout.take().expect("worker stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read worker address");
    let addr = line
        .trim()
        .strip_prefix("stoker worker listening on ")
        .unwrap_or_else(|| panic!("unexpected worker banner {line:?}; log: {}", read(log)))
        .to_owned();
    Worker {
        addr,
        metrics_url: None,
        child: ChildGuard(child),
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Sends SIGSTOP to a process, and SIGCONT when dropped.
struct Paused(u32);

impl Paused {
    fn new(pid: u32) -> Self {
        signal(pid, "-STOP");
        Self(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

/// The shard files of `dir`, sorted.
fn shard_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tar"))
        .collect();
    v.sort();
    v
}

/// Lines of a worker log that report a resume.
fn resume_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("resuming with a ranged get"))
        .collect()
}

const STREAM_ARGS: &[&str] = &["--batch-size", "8", "--image-size", "48", "--transform", "eval"];

#[test]
fn a_paused_server_is_waited_out_with_resumes_and_every_sample_arrives_once() {
    let s3 = S3Server::start();
    let bucket = s3.bucket("data");
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 400, 4, 500, 375);
    let expected = image_folder_keys(&images);
    pack(&images, "s3://data/big/", "16M", &s3.env());
    let shards = shard_files(&bucket.join("big"));
    let bytes: u64 = shards.iter().map(|p| p.metadata().unwrap().len()).sum();

    // Two shards of about 14 MB, more than socket buffers hold (about 4 MB
    // here). The proxy paces responses at 2 MB/s, so that the stream takes
    // a few seconds and the worker waits on the network, not on its own
    // decoding, when the server stops. It also shows when shard reads begin
    // and which requests were ranged.
    let proxy = FaultProxy::throttled(&s3.endpoint, 2 << 20);
    let log = dir.path().join("worker.log");
    let worker = logged_worker(
        1,
        &[
            "--s3-read-timeout",
            "1",
            "--s3-attempt-timeout",
            "2",
            "--s3-max-attempts",
            "5",
        ],
        &s3.env_with_endpoint(&proxy.endpoint()),
        &log,
    );

    let started = Instant::now();
    let (run, paused_at) = std::thread::scope(|scope| {
        let streaming = scope.spawn(|| stream(&[&worker], "s3://data/big/", STREAM_ARGS, &[]));
        // Pause the server shortly after the first shard body started.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !proxy.requests().iter().any(|r| r.is_get_of(".tar")) {
            assert!(Instant::now() < deadline, "no shard was requested within 30s");
            assert!(!streaming.is_finished(), "stream ended before reading a shard");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        let paused_at = started.elapsed();
        {
            let _paused = Paused::new(s3.child.0.id());
            std::thread::sleep(Duration::from_secs(5));
        }
        (streaming.join().unwrap(), paused_at)
    });
    let elapsed = started.elapsed();
    let log = read(&log);
    let resumes = resume_lines(&log);
    let ranged: Vec<_> = proxy.requests().into_iter().filter(|r| r.range.is_some()).collect();
    eprintln!(
        "paused server: {} shards, {bytes} bytes; paused at {paused_at:.1?} for 5s, stream took {elapsed:.1?}, \
         {} resumes, {} ranged GETs",
        shards.len(),
        resumes.len(),
        ranged.len()
    );
    for l in &resumes {
        eprintln!("  {l}");
    }
    assert_exactly_once(&run, &expected, 0..1);
    assert_eq!(run.num("skipped"), 0);
    assert!(
        elapsed > Duration::from_secs(5),
        "the stream ended before the pause did ({elapsed:?}): the dataset is too small"
    );
    assert!(!resumes.is_empty(), "no resume in the worker log:\n{log}");
    assert!(!ranged.is_empty(), "no ranged GET reached the server");
    for r in &ranged {
        assert!(
            r.range.as_deref().is_some_and(|v| v.starts_with("bytes=")),
            "odd range {r:?}"
        );
    }
}

#[test]
fn cut_shard_bodies_resume_with_ranged_gets_and_deliver_exactly_once() {
    let s3 = S3Server::start();
    s3.bucket("data");
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 120, 3, 320, 240);
    let expected = image_folder_keys(&images);
    pack(&images, "s3://data/cut/", "600K", &s3.env());

    // Cut the first 4 shard responses (first reads and resumed reads alike)
    // 100,000 bytes in.
    let proxy = FaultProxy::start(&s3.endpoint, 100_000, 4);
    let log = dir.path().join("worker.log");
    let worker = logged_worker(2, &[], &s3.env_with_endpoint(&proxy.endpoint()), &log);

    let started = Instant::now();
    let run = stream(&[&worker], "s3://data/cut/", STREAM_ARGS, &[]);
    let elapsed = started.elapsed();
    let log = read(&log);
    let resumes = resume_lines(&log);
    let ranged: Vec<_> = proxy.requests().into_iter().filter(|r| r.range.is_some()).collect();
    eprintln!(
        "cut bodies: {} cuts, {} resumes, {} ranged GETs, stream took {elapsed:.1?}",
        proxy.cuts(),
        resumes.len(),
        ranged.len()
    );
    for l in &resumes {
        eprintln!("  {l}");
    }
    for r in &ranged {
        eprintln!("  {} range: {}", r.line, r.range.as_deref().unwrap_or_default());
    }
    assert_exactly_once(&run, &expected, 0..1);
    assert_eq!(run.num("skipped"), 0);
    assert_eq!(proxy.cuts(), 4, "the proxy did not cut as planned");
    assert_eq!(resumes.len(), 4, "one resume per cut expected:\n{log}");
    assert_eq!(ranged.len(), 4, "one ranged GET per cut expected: {ranged:?}");
    for r in &ranged {
        let from: u64 = r
            .range
            .as_deref()
            .and_then(|v| v.strip_prefix("bytes="))
            .and_then(|v| v.strip_suffix('-'))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("unexpected range {r:?}"));
        assert!(from > 0, "resume from the start: {r:?}");
    }
}

#[test]
fn a_missing_shard_fails_fast_naming_it_without_retries() {
    let s3 = S3Server::start();
    let bucket = s3.bucket("data");
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 60, 2, 160, 120);
    pack(&images, "s3://data/gone/", "60K", &s3.env());
    // Listed in the index, deleted from the bucket.
    let shards = shard_files(&bucket.join("gone"));
    assert!(shards.len() >= 3, "{shards:?}");
    let missing = shards[1].file_name().unwrap().to_str().unwrap().to_owned();
    std::fs::remove_file(&shards[1]).unwrap();

    let proxy = FaultProxy::passthrough(&s3.endpoint);
    let log = dir.path().join("worker.log");
    let worker = logged_worker(1, &[], &s3.env_with_endpoint(&proxy.endpoint()), &log);
    let started = Instant::now();
    let run = stream(&[&worker], "s3://data/gone/", STREAM_ARGS, &[]);
    let elapsed = started.elapsed();
    let stderr = run.stderr();
    let gets = proxy.requests().iter().filter(|r| r.is_get_of(&missing)).count();
    eprintln!(
        "missing shard: failed in {elapsed:.1?} after {gets} GET(s) of it: {}",
        stderr.trim()
    );
    assert!(!run.success(), "a missing shard must fail the run");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    let object = format!("s3://data/gone/{missing}");
    assert!(
        stderr.contains(&object) && stderr.contains("does not exist"),
        "error does not name {object}: {stderr}"
    );
    assert!((1..=2).contains(&gets), "{gets} GETs of {missing}");
    assert!(resume_lines(&read(&log)).is_empty(), "a 404 was resumed");
}

#[test]
fn refused_credentials_fail_fast_naming_the_object_without_retries() {
    let s3 = S3Server::start();
    s3.bucket("data");
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 20, 2, 96, 64);
    pack(&images, "s3://data/locked/", "60K", &s3.env());

    let proxy = FaultProxy::passthrough(&s3.endpoint);
    let bad_secret = "not-the-secret-0123456789";
    let env: Vec<_> = s3
        .env_with_endpoint(&proxy.endpoint())
        .into_iter()
        .map(|(k, v)| {
            if k == "AWS_SECRET_ACCESS_KEY" {
                (k, bad_secret.to_owned())
            } else {
                (k, v)
            }
        })
        .collect();
    let log = dir.path().join("worker.log");
    let worker = logged_worker(1, &[], &env, &log);
    let started = Instant::now();
    let run = stream(&[&worker], "s3://data/locked/", STREAM_ARGS, &[]);
    let elapsed = started.elapsed();
    let stderr = run.stderr();
    let requests = proxy.requests();
    eprintln!(
        "refused credentials: failed in {elapsed:.1?} after {} request(s): {}",
        requests.len(),
        stderr.trim()
    );
    assert!(!run.success(), "refused credentials must fail the run");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    assert!(
        stderr.contains("s3://data/locked/") && stderr.contains("denied"),
        "error does not name the object: {stderr}"
    );
    assert!(!stderr.contains(bad_secret), "the secret leaked: {stderr}");
    assert!(
        !read(&log).contains(bad_secret),
        "the secret leaked into the worker log"
    );
    assert!(
        (1..=2).contains(&requests.len()),
        "{} requests for a refused read: {requests:?}",
        requests.len()
    );
}
