//! Test harness: real `stoker` processes, a real S3-compatible server
//! (s3s-fs), real Python tools. Everything binds 127.0.0.1:0 or a free
//! port, and every child process is killed when its guard drops.

#![allow(dead_code, reason = "each test module uses a different part of the harness")]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub fn stoker_bin() -> &'static str {
    env!("CARGO_BIN_EXE_stoker")
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("server/ has a parent")
        .to_owned()
}

/// A `stoker` command with logs quiet unless the test asks.
pub fn stoker() -> Command {
    let mut c = Command::new(stoker_bin());
    c.env_remove("RUST_LOG")
        .env_remove("STOKER_TOKEN")
        .env("STOKER_LOG", "warn");
    c
}

/// Kills the child on drop.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `stoker worker` process.
pub struct Worker {
    pub addr: String,
    pub child: ChildGuard,
}

impl Worker {
    pub fn start(threads: usize) -> Self {
        Self::start_with_env(threads, &[])
    }

    pub fn start_with_env(threads: usize, env: &[(&str, &str)]) -> Self {
        let mut cmd = stoker();
        cmd.args(["worker", "--listen", "127.0.0.1:0", "--threads", &threads.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
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
            .unwrap_or_else(|| panic!("unexpected worker banner {line:?}"))
            .to_owned();
        Self {
            addr,
            child: ChildGuard(child),
        }
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listening on 127.0.0.1:{port} after 20s");
}

/// Finds a tool installed by scripts/test.sh, or fails with how to get it.
fn tool(env_var: &str, installed: &str, hint: &str) -> PathBuf {
    if let Ok(p) = std::env::var(env_var) {
        return PathBuf::from(p);
    }
    let p = repo_root().join(installed);
    assert!(
        p.exists(),
        "{hint} not found: set {env_var} or run scripts/test.sh, which installs it at {installed}"
    );
    p
}

/// A real S3-compatible server (s3s-fs) over a temporary folder.
pub struct S3Server {
    pub endpoint: String,
    pub root: tempfile::TempDir,
    pub access_key: String,
    pub secret_key: String,
    _child: ChildGuard,
}

impl S3Server {
    pub fn start() -> Self {
        let bin = tool("STOKER_TEST_S3S_FS", "target/tools/bin/s3s-fs", "s3s-fs");
        let root = tempfile::tempdir().expect("s3 root");
        let port = free_port();
        let (access_key, secret_key) = ("stoker-test-key".to_owned(), "stoker-test-secret".to_owned());
        let child = Command::new(bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", &access_key, "--secret-key", &secret_key])
            .arg(root.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn s3s-fs");
        let child = ChildGuard(child);
        wait_for_port(port);
        Self {
            endpoint: format!("http://127.0.0.1:{port}"),
            root,
            access_key,
            secret_key,
            _child: child,
        }
    }

    /// Creates a bucket (a folder of the server's root).
    pub fn bucket(&self, name: &str) -> PathBuf {
        let p = self.root.path().join(name);
        std::fs::create_dir_all(&p).expect("create bucket");
        p
    }

    /// Environment for processes that talk to this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", self.access_key.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret_key.clone()),
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
        ]
    }

    pub fn start_worker(&self, threads: usize) -> Worker {
        let env = self.env();
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Worker::start_with_env(threads, &pairs)
    }
}

/// The Python interpreter with pillow, numpy and webdataset.
pub fn python() -> Command {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    let py = PY.get_or_init(|| {
        tool(
            "STOKER_TEST_PYTHON",
            "target/pyenv/bin/python",
            "python with pillow/numpy/webdataset",
        )
    });
    let mut c = Command::new(py);
    c.env("PYTHONDONTWRITEBYTECODE", "1");
    c
}

pub fn python_script(name: &str) -> PathBuf {
    repo_root().join("tests/python").join(name)
}

/// Runs a command, panicking with its output if it fails.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `stoker synth`: an ImageFolder of procedural JPEGs.
pub fn synth_images(dir: &Path, images: usize, classes: usize, width: u32, height: u32) {
    run_ok(stoker().args([
        "synth",
        "--output",
        dir.to_str().expect("utf-8 path"),
        "--images",
        &images.to_string(),
        "--classes",
        &classes.to_string(),
        "--width",
        &width.to_string(),
        "--height",
        &height.to_string(),
    ]));
}

/// `stoker pack` of an ImageFolder to `output`.
pub fn pack(input: &Path, output: &str, shard_size: &str, env: &[(&'static str, String)]) {
    let mut cmd = stoker();
    cmd.args([
        "pack",
        "--input",
        input.to_str().expect("utf-8 path"),
        "--output",
        output,
        "--shard-size",
        shard_size,
    ]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_ok(&mut cmd);
}

/// The keys and labels an ImageFolder holds, as pack names them.
pub fn image_folder_keys(dir: &Path) -> Vec<(String, i64)> {
    let mut classes: Vec<_> = std::fs::read_dir(dir)
        .expect("read image folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    classes.sort();
    let mut out = Vec::new();
    for (label, class) in classes.iter().enumerate() {
        for f in std::fs::read_dir(dir.join(class)).expect("read class") {
            let name = f.expect("entry").file_name().to_string_lossy().into_owned();
            let stem = name.rsplit_once('.').map_or(name.as_str(), |(s, _)| s).to_owned();
            out.push((format!("{class}/{stem}"), label as i64));
        }
    }
    out.sort();
    out
}

/// Result of `stoker stream`.
pub struct StreamRun {
    pub output: Output,
    pub json: Option<serde_json::Value>,
    /// (epoch, key, label) per delivered sample.
    pub keys: Vec<(u64, String, i64)>,
}

impl StreamRun {
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    pub fn success(&self) -> bool {
        self.output.status.success()
    }

    pub fn num(&self, field: &str) -> u64 {
        self.json
            .as_ref()
            .and_then(|j| j.get(field))
            .and_then(serde_json::Value::as_u64)
            .unwrap_or_else(|| panic!("no numeric {field} in summary; stderr: {}", self.stderr()))
    }
}

/// Runs `stoker stream --json --keys-out` with `args`.
pub fn stream(workers: &[&Worker], dataset: &str, args: &[&str], env: &[(&'static str, String)]) -> StreamRun {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys_path = dir.path().join("keys.tsv");
    let addrs: Vec<&str> = workers.iter().map(|w| w.addr.as_str()).collect();
    let mut cmd = stoker();
    cmd.args(["stream", "--workers", &addrs.join(","), "--dataset", dataset, "--json"])
        .args(["--keys-out", keys_path.to_str().expect("utf-8 path")])
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = cmd.output().expect("spawn stoker stream");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json = stdout.lines().last().and_then(|l| serde_json::from_str(l).ok());
    let keys = std::fs::read_to_string(&keys_path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let mut f = l.split('\t');
            let epoch = f.next().and_then(|s| s.parse().ok()).expect("epoch column");
            let key = f.next().expect("key column").to_owned();
            let label = f.next().and_then(|s| s.parse().ok()).expect("label column");
            (epoch, key, label)
        })
        .collect();
    StreamRun { output, json, keys }
}

/// Asserts that every epoch in `epochs` delivered each expected key exactly
/// once, with its label.
pub fn assert_exactly_once(run: &StreamRun, expected: &[(String, i64)], epochs: std::ops::Range<u64>) {
    assert!(run.success(), "stream failed: {}", run.stderr());
    for epoch in epochs.clone() {
        let mut got: Vec<(String, i64)> = run
            .keys
            .iter()
            .filter(|(e, _, _)| *e == epoch)
            .map(|(_, k, l)| (k.clone(), *l))
            .collect();
        got.sort();
        let before = got.len();
        got.dedup();
        assert_eq!(
            before,
            got.len(),
            "epoch {epoch}: {} duplicate deliveries",
            before - got.len()
        );
        let missing: Vec<_> = expected
            .iter()
            .filter(|k| got.binary_search(k).is_err())
            .take(5)
            .collect();
        assert!(
            missing.is_empty(),
            "epoch {epoch}: missing samples (first 5): {missing:?}"
        );
        assert_eq!(got.len(), expected.len(), "epoch {epoch}: unexpected extra samples");
    }
    let n = expected.len() as u64 * (epochs.end - epochs.start);
    assert_eq!(run.num("samples"), n);
}
