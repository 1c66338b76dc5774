//! Test harness: real `stoker` processes, a real S3-compatible server
//! (s3s-fs), real Python tools. Everything binds 127.0.0.1:0 or a free
//! port, and every child process is killed when its guard drops.

#![allow(dead_code, reason = "each test module uses a different part of the harness")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The `stoker` binary built with this test binary, or `STOKER_BIN` (for
/// test binaries carried to another machine, as scripts/gpu-check.sh does).
pub fn stoker_bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| std::env::var("STOKER_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_stoker").to_owned()))
}

/// What a test needs of the machine beyond this build. Without it the test
/// says why (`skipped: TEST: REASON`) and passes, unless `STOKER_REQUIRE`
/// (names, comma-separated) requires it: then its absence fails the test.
/// `scripts/gpu-check.sh` requires `gpu`; `.ci/run` requires `cargo`, and
/// `docker` and `root` where it runs as root with Docker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A CUDA GPU with nvJPEG (the GPU tests).
    Gpu,
    /// Docker, as root, with the local base images scripts/test.sh makes.
    Docker,
    /// cargo, for `cargo metadata` (absent where a staged test binary runs).
    Cargo,
    /// Running as root (a process started as another user).
    Root,
}

impl Need {
    const ALL: [Need; 4] = [Need::Gpu, Need::Docker, Need::Cargo, Need::Root];

    fn name(self) -> &'static str {
        match self {
            Need::Gpu => "gpu",
            Need::Docker => "docker",
            Need::Cargo => "cargo",
            Need::Root => "root",
        }
    }

    /// The needs `STOKER_REQUIRE` names; a name no test knows panics.
    fn required() -> Vec<Need> {
        let list = std::env::var("STOKER_REQUIRE").unwrap_or_default();
        list.split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| {
                *Need::ALL.iter().find(|k| k.name() == n).unwrap_or_else(|| {
                    panic!("STOKER_REQUIRE={list:?}: {n:?} is not a need; the needs are gpu, docker, cargo, root")
                })
            })
            .collect()
    }

    /// Says that `test` is skipped for want of this need, because of
    /// `reason`; fails it instead when `STOKER_REQUIRE` requires the need.
    pub fn skip(self, test: &str, reason: impl std::fmt::Display) {
        assert!(
            !Self::required().contains(&self),
            "{test}: STOKER_REQUIRE requires {} and this machine has none: {reason}",
            self.name()
        );
        println!("skipped: {test}: {reason}");
        eprintln!("skipped: {test}: {reason}");
    }
}

/// The checkout the tests run from: `STOKER_REPO_ROOT` when set (a test
/// binary carried to another machine runs against a copy of the repository
/// at another path, as scripts/gpu-check.sh does), else the checkout this
/// binary was built in.
pub fn repo_root() -> PathBuf {
    if let Some(root) = std::env::var_os("STOKER_REPO_ROOT").filter(|r| !r.is_empty()) {
        return PathBuf::from(root);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_owned()
}

/// A `stoker` command with logs quiet unless the test asks, and no CA
/// files from the machine running the tests (tests that want one set it).
pub fn stoker() -> Command {
    let mut c = Command::new(stoker_bin());
    c.env_remove("RUST_LOG")
        .env_remove("STOKER_TOKEN")
        .env_remove("AWS_CA_BUNDLE")
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
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

/// A worker's environment that makes it take 20 ms a sample (the
/// `stoker-sample-pause` failpoint): a test that disrupts a worker once the
/// first batch is in catches that worker mid-item however fast the machine.
/// Without it, a fast host's workers can finish (or ring up) every item
/// before the disruption, and nothing is reassigned.
pub const SLOW_SAMPLES: [(&str, &str); 1] = [("FAILPOINTS", "stoker-sample-pause=sleep(20)")];

/// A `stoker worker` process.
pub struct Worker {
    pub addr: String,
    /// `http://ADDR/metrics` when started with `--metrics-listen`.
    pub metrics_url: Option<String>,
    pub child: ChildGuard,
}

impl Worker {
    pub fn start(threads: usize) -> Self {
        Self::start_with_env(threads, &[])
    }

    pub fn start_with_env(threads: usize, env: &[(&str, &str)]) -> Self {
        Self::start_with(threads, &[], env)
    }

    /// A worker with extra command-line `args` (`--listen` among them
    /// replaces the default 127.0.0.1:0) and environment.
    pub fn start_with(threads: usize, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::try_start_with(threads, args, env).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Worker::start_with`], but a worker that does not come up is
    /// an error, not a panic.
    pub fn try_start_with(threads: usize, args: &[&str], env: &[(&str, &str)]) -> Result<Self, String> {
        Self::spawn(threads, args, env, Stdio::inherit())
    }

    /// Like [`Worker::start_with`] on an address (`--listen` in `args`) a
    /// process has just let go, which can take a moment to be free again:
    /// tried every 100 ms for 5 s.
    pub fn start_again(threads: usize, args: &[&str]) -> Self {
        let mut last = String::new();
        for _ in 0..50 {
            match Self::try_start_with(threads, args, &[]) {
                Ok(w) => return w,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("a worker with {args:?} would not start again: {last}");
    }

    /// A worker whose log (stderr) goes to the file `log`.
    pub fn start_logging_to(threads: usize, args: &[&str], env: &[(&str, &str)], log: &Path) -> Self {
        let file = std::fs::File::create(log).expect("create worker log");
        Self::spawn(threads, args, env, Stdio::from(file)).unwrap_or_else(|e| panic!("{e}"))
    }

    fn spawn(threads: usize, args: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Result<Self, String> {
        let mut cmd = stoker();
        cmd.args(["worker", "--threads", &threads.to_string()]);
        if !args.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        cmd.args(args).stdout(Stdio::piped()).stderr(stderr);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = ChildGuard(cmd.spawn().map_err(|e| format!("spawn stoker worker: {e}"))?);
        let stdout = child.0.stdout.take().ok_or("no worker stdout")?;
        let mut line = String::new();
        let mut stdout = BufReader::new(stdout);
        stdout
            .read_line(&mut line)
            .map_err(|e| format!("read worker address: {e}"))?;
        let addr = line
            .trim()
            .strip_prefix("stoker worker listening on ")
            .ok_or_else(|| format!("unexpected worker banner {line:?}"))?
            .to_owned();
        let metrics_url = if args.contains(&"--metrics-listen") {
            line.clear();
            stdout
                .read_line(&mut line)
                .map_err(|e| format!("read worker metrics address: {e}"))?;
            let url = line
                .trim()
                .strip_prefix("stoker worker metrics on ")
                .ok_or_else(|| format!("unexpected worker metrics banner {line:?}"))?;
            Some(url.to_owned())
        } else {
            None
        };
        Ok(Self {
            addr,
            metrics_url,
            child,
        })
    }
}

/// Sends `sig` (e.g. "-KILL", "-STOP") to process `pid`.
pub fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid} failed");
}

/// Peak resident memory of a process, from `VmHWM` in /proc/PID/status.
pub fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in /proc/{pid}/status:\n{status}"));
    kib << 10
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
    /// The server process (tests pause it with SIGSTOP).
    pub child: ChildGuard,
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
            child,
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

    /// [`S3Server::env`] with the endpoint replaced (by a proxy's).
    pub fn env_with_endpoint(&self, endpoint: &str) -> Vec<(&'static str, String)> {
        self.env()
            .into_iter()
            .map(|(k, v)| {
                if k == "AWS_ENDPOINT_URL" {
                    (k, endpoint.to_owned())
                } else {
                    (k, v)
                }
            })
            .collect()
    }

    pub fn start_worker(&self, threads: usize) -> Worker {
        self.start_worker_with(threads, &[])
    }

    /// A worker that reads from this server, with extra arguments.
    pub fn start_worker_with(&self, threads: usize, args: &[&str]) -> Worker {
        let env = self.env();
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Worker::start_with(threads, args, &pairs)
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

/// The Python interpreter with torch, torchvision and lightning beside
/// the stoker package (scripts/test.sh installs it at target/torchenv; the
/// main test venv stays without torch, for the numpy path).
pub fn torch_python() -> Command {
    let py = tool(
        "STOKER_TEST_TORCH_PYTHON",
        "target/torchenv/bin/python",
        "python with torch, torchvision and lightning",
    );
    let mut c = Command::new(py);
    c.env("PYTHONDONTWRITEBYTECODE", "1");
    c
}

/// The Python interpreter with MXNet 1.9.1 (and numpy<1.24, which it
/// needs): MXNet's own RecordIO writer.
pub fn mxnet_python() -> Command {
    let py = tool(
        "STOKER_TEST_MXNET_PYTHON",
        "target/mxenv/bin/python",
        "python with mxnet 1.9.1",
    );
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
/// `stoker pack`, which must succeed; its output (the report on stderr).
pub fn pack(input: &Path, output: &str, shard_size: &str, env: &[(&'static str, String)]) -> std::process::Output {
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
    run_ok(&mut cmd)
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
    let addrs: Vec<&str> = workers.iter().map(|w| w.addr.as_str()).collect();
    stream_with(&addrs, dataset, args, env)
}

/// [`stream`] to worker addresses (workers that may not be up yet).
pub fn stream_addrs(addrs: &[String], dataset: &str, args: &[&str]) -> StreamRun {
    let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    stream_with(&addrs, dataset, args, &[])
}

fn stream_with(addrs: &[&str], dataset: &str, args: &[&str], env: &[(&'static str, String)]) -> StreamRun {
    let (mut cmd, keys_path, _dir) = StreamChild::command(addrs, dataset, args, env);
    let output = cmd.output().expect("spawn stoker stream");
    StreamRun::read(output, &keys_path)
}

/// A `stoker stream --json --keys-out` running in the background, for
/// tests that disrupt workers while it runs.
pub struct StreamChild {
    /// `None` once finished; killed on drop otherwise.
    child: Option<Child>,
    keys_path: PathBuf,
    /// Its stderr, once [`StreamChild::wait_for_log`] reads it.
    log: Option<std::sync::Arc<std::sync::Mutex<String>>>,
    _dir: tempfile::TempDir,
}

impl StreamChild {
    pub fn spawn(workers: &[&Worker], dataset: &str, args: &[&str]) -> Self {
        let addrs: Vec<&str> = workers.iter().map(|w| w.addr.as_str()).collect();
        Self::spawn_addrs(&addrs, dataset, args)
    }

    /// [`StreamChild::spawn`] with `--workers` entries as given.
    pub fn spawn_addrs(addrs: &[&str], dataset: &str, args: &[&str]) -> Self {
        Self::spawn_addrs_env(addrs, dataset, args, &[])
    }

    /// [`StreamChild::spawn_addrs`] with more environment.
    pub fn spawn_addrs_env(addrs: &[&str], dataset: &str, args: &[&str], env: &[(&'static str, &str)]) -> Self {
        let env: Vec<(&'static str, String)> = env.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        let (mut cmd, keys_path, dir) = Self::command(addrs, dataset, args, &env);
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn stoker stream");
        Self {
            child: Some(child),
            keys_path,
            log: None,
            _dir: dir,
        }
    }

    /// Waits for a line of the stream's log (stderr) containing `text` and
    /// returns it. The log is read from then on, so [`Self::finish`] no
    /// longer has it.
    pub fn wait_for_log(&mut self, text: &str, limit: Duration) -> String {
        let log = self.log.get_or_insert_with(|| {
            let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
            let stderr = self
                .child
                .as_mut()
                .and_then(|c| c.stderr.take())
                .expect("stream's stderr");
            let sink = std::sync::Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut l = sink.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            });
            log
        });
        let deadline = Instant::now() + limit;
        loop {
            if let Some(line) = log.lock().unwrap().lines().find(|l| l.contains(text)) {
                return line.to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "no {text:?} in the stream's log within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILLs the stream.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn command(
        addrs: &[&str],
        dataset: &str,
        args: &[&str],
        env: &[(&'static str, String)],
    ) -> (Command, PathBuf, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let keys_path = dir.path().join("keys.tsv");
        let mut cmd = stoker();
        cmd.args(["stream", "--workers", &addrs.join(","), "--dataset", dataset, "--json"])
            .args(["--keys-out", keys_path.to_str().expect("utf-8 path")])
            .args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        (cmd, keys_path, dir)
    }

    /// Waits until the stream has handed at least `n` samples to its
    /// consumer (the keys file is written batch by batch).
    pub fn wait_for_samples(&mut self, n: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let lines = std::fs::read_to_string(&self.keys_path).map_or(0, |t| t.lines().count());
            if lines >= n {
                return;
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("stoker stream exited ({status}) after {lines} samples, before {n}");
            }
            assert!(
                Instant::now() < deadline,
                "stoker stream delivered {lines} samples in {limit:?}, not {n}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn finish(mut self) -> StreamRun {
        let child = self.child.take().expect("stream not finished yet");
        let output = child.wait_with_output().expect("wait for stoker stream");
        StreamRun::read(output, &self.keys_path)
    }
}

impl Drop for StreamChild {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl StreamRun {
    fn read(output: Output, keys_path: &Path) -> Self {
        Self::from_output(output, &std::fs::read_to_string(keys_path).unwrap_or_default())
    }

    /// A run from its output and its `--keys-out` file's text (a stream
    /// that ran elsewhere, as in a container).
    pub fn from_output(output: Output, keys_text: &str) -> Self {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let json = stdout.lines().last().and_then(|l| serde_json::from_str(l).ok());
        let keys = keys_text
            .lines()
            .map(|l| {
                let mut f = l.split('\t');
                let epoch = f.next().and_then(|s| s.parse().ok()).expect("epoch column");
                let key = f.next().expect("key column").to_owned();
                let label = f.next().and_then(|s| s.parse().ok()).expect("label column");
                (epoch, key, label)
            })
            .collect();
        Self { output, json, keys }
    }
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

/// GET `url` (`http://HOST:PORT/PATH`) as HTTP/1.0, so the body comes
/// whole, not chunked: the head and the body of a 200 answer, or why not.
pub fn try_get(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("not an http url: {url}"))?;
    let (host, path) = rest.split_once('/').map_or((rest, "/"), |(h, p)| (h, p));
    let mut conn = TcpStream::connect(host).map_err(|e| format!("connect to {host}: {e}"))?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(conn, "GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").map_err(|e| format!("{url}: {e}"))?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer).map_err(|e| format!("{url}: {e}"))?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{url}: no http answer"))?;
    if !(head.starts_with("HTTP/1.") && head.get(9..).is_some_and(|s| s.starts_with("200"))) {
        return Err(format!("{url}: {head}"));
    }
    Ok((head.to_owned(), body.to_owned()))
}

fn get(url: &str) -> (String, String) {
    try_get(url).unwrap_or_else(|e| panic!("{e}"))
}

/// GET a Prometheus metrics page: the body of a 200 answer in text format
/// 0.0.4.
pub fn http_get(url: &str) -> String {
    let (head, body) = get(url);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    body
}

/// GET a JSON document (a 200 answer).
pub fn http_get_json(url: &str) -> serde_json::Value {
    let (_, body) = get(url);
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {body}"))
}

/// The local base image the Docker tests build on (scripts/docker-base.sh:
/// no registry can be reached here).
pub const DOCKER_BASE: &str = "stoker-base:bookworm";

/// The tag the Docker tests give the images they build.
pub const DOCKER_TAG: &str = "test";

/// Runs `docker ARGS`: its trimmed stdout, or why it failed.
pub fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run docker: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "docker {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Builds stoker-worker, stoker-worker-gpu and stoker-s3 (tag
/// [`DOCKER_TAG`]) with deploy/docker/build.sh, as users do, from this
/// build's binary, on [`DOCKER_BASE`] for both bases and with no CUDA
/// packages (NVIDIA's repository cannot be reached either).
pub fn build_images() {
    let s3s_fs = tool("STOKER_TEST_S3S_FS", "target/tools/bin/s3s-fs", "s3s-fs");
    run_ok(Command::new(repo_root().join("deploy/docker/build.sh")).args([
        "--tag",
        DOCKER_TAG,
        "--base",
        DOCKER_BASE,
        "--cuda-base",
        DOCKER_BASE,
        "--cuda-packages",
        "",
        "--bin",
        stoker_bin(),
        "--s3s-fs",
        s3s_fs.to_str().expect("utf-8 path"),
    ]));
}
