//! Local workers (`"local"` in the worker list): started and supervised by
//! the loader, exactly once through a kill (restarted, its items to the
//! others meanwhile), mixed with a remote worker, private to this user,
//! and gone with the loader or its process. The Python package's
//! `Loader(workers="local")` is in `python`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use stoker_cli::embedded::EmbeddedWorker;
use stoker_client::{InProcessStart, InProcessWorker, LOCAL, Loader, LoaderConfig, LocalWorkers, TransformSpec};

use crate::support::{StreamChild, Worker, image_folder_keys, pack, signal, stoker_bin, synth_images};

fn dataset(images: usize) -> (tempfile::TempDir, String, Vec<(String, i64)>) {
    let dir = tempfile::tempdir().unwrap();
    let pics = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&pics, images, 3, 96, 72);
    pack(&pics, shards.to_str().unwrap(), "60K", &[]);
    let keys = image_folder_keys(&pics);
    let shards = shards.to_str().unwrap().to_owned();
    (dir, shards, keys)
}

fn local_config(workers: Vec<String>, dataset: &str) -> LoaderConfig {
    let mut config = LoaderConfig::new(workers, dataset, 8, TransformSpec::train(32));
    let mut local = LocalWorkers::new(vec![stoker_bin().into()]);
    local.threads = Some(1);
    config.local = Some(local);
    config
}

fn alive(pid: u32) -> bool {
    // A zombie has exited: only its entry is left until it is reaped.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

fn wait_gone(pid: u32, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "{what}: local worker {pid} still runs after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_workers_beside_a_remote_one_deliver_exactly_once_through_a_kill_and_are_restarted() {
    let (_dir, shards, keys) = dataset(80);
    let remote = Worker::start(1);
    let loader = Loader::connect(local_config(vec![LOCAL.into(), remote.addr.clone()], &shards))
        .await
        .unwrap();
    let started = loader.local_workers();
    assert_eq!(started.len(), 1, "{started:?}");
    let first = started[0].clone();
    assert_eq!(first.role, "cpu");
    assert!(first.addr.starts_with("unix:"), "{first:?}");
    let pid = first.pid.expect("a running local worker has a pid");

    let expected: BTreeMap<String, i64> = keys.into_iter().collect();
    // Epochs until the restarted worker serves again; each exactly once.
    let deadline = Instant::now() + Duration::from_secs(30);
    for epoch in 0.. {
        let mut stream = loader.epoch(epoch).unwrap();
        let mut got = BTreeMap::new();
        while let Some(batch) = stream.next_batch().await {
            let batch = batch.unwrap();
            if epoch == 0 && got.is_empty() {
                // Mid-epoch, the local worker dies.
                signal(pid, "-KILL");
            }
            for (key, label) in batch.keys.iter().zip(&batch.labels) {
                assert!(got.insert(key.clone(), *label).is_none(), "epoch {epoch}: {key} twice");
            }
        }
        assert_eq!(got, expected, "epoch {epoch}: every sample exactly once");
        let report = stream.report();
        let by_worker: BTreeMap<&str, u64> = report.workers.iter().map(|w| (w.addr.as_str(), w.samples)).collect();
        if epoch == 0 {
            assert!(
                by_worker[remote.addr.as_str()] > 0,
                "the remote worker took the items: {by_worker:?}"
            );
        } else if by_worker[first.addr.as_str()] > 0 {
            let ring: u64 = report.workers.iter().map(|w| w.ring_samples).sum();
            assert!(ring > 0, "the local worker writes into the shared ring");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted worker served nothing in {epoch} epochs: {by_worker:?}"
        );
    }
    let now = loader.local_workers();
    assert_eq!(now[0].restarts, 1, "{now:?}");
    assert_eq!(now[0].addr, first.addr, "restarted on the same socket");
    let new_pid = now[0].pid.expect("restarted");
    assert_ne!(new_pid, pid);
    assert!(!alive(pid));

    drop(loader);
    wait_gone(new_pid, Duration::from_secs(5), "the loader was dropped");
    let socket = first.addr.strip_prefix("unix:").unwrap();
    let dir = std::path::Path::new(socket).parent().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while dir.exists() {
        assert!(Instant::now() < deadline, "{} outlived its loader", dir.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A worker started in this process, as the Python package starts the GPU
/// worker of `"local"`; notes when the fleet has stopped and joined it.
struct InProcess {
    worker: Option<EmbeddedWorker>,
    joined: Arc<AtomicBool>,
}

impl InProcessWorker for InProcess {
    fn is_finished(&self) -> bool {
        self.worker.as_ref().is_none_or(EmbeddedWorker::is_finished)
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        // EmbeddedWorker's drop stops it and waits for its thread.
        drop(self.worker.take());
        self.joined.store(true, Ordering::SeqCst);
    }
}

/// Starts the worker in this process with `stoker worker`'s arguments,
/// `--device cuda` turned into `--device cpu` where `on_cpu` (no GPU here).
fn in_process(on_cpu: bool, joined: Arc<AtomicBool>) -> InProcessStart {
    InProcessStart(Arc::new(move |args: Vec<String>| {
        // Its lanes take the share of the SMs chosen for a training GPU.
        let sms = ["--gpu-sms".to_owned(), stoker_client::local_gpu_sms()];
        assert!(args.windows(2).any(|w| w == sms), "{args:?}");
        let args = args
            .into_iter()
            .map(|a| if on_cpu && a == "cuda" { "cpu".to_owned() } else { a });
        let worker = EmbeddedWorker::start(args).map_err(|e| format!("{e:#}"))?;
        Ok(Box::new(InProcess {
            worker: Some(worker),
            joined: Arc::clone(&joined),
        }) as Box<dyn InProcessWorker>)
    }))
}

/// The GPU worker of `"local"` started inside this process (as the Python
/// package does, its lanes then on the trainer's CUDA context), here on
/// the CPU: it listens on its own socket in the private directory, writes
/// into the loader's shared-memory ring, serves beside the CPU worker
/// process, and is stopped and joined when the loader drops. Where no GPU
/// can be used, asking for it fails the loader naming why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_worker_in_this_process_serves_through_the_ring_and_stops_with_the_loader() {
    let (_dir, shards, keys) = dataset(60);
    let joined = Arc::new(AtomicBool::new(false));
    let mut config = local_config(vec![LOCAL.into()], &shards);
    let local = config.local.as_mut().unwrap();
    local.gpu = Some(0);
    local.in_process = Some(in_process(true, Arc::clone(&joined)));
    let loader = Loader::connect(config).await.unwrap();
    let workers = loader.local_workers();
    let inside = workers.iter().find(|w| w.in_process).expect("a worker in this process");
    let outside = workers.iter().find(|w| !w.in_process).expect("a worker process");
    assert_eq!(
        (inside.role, inside.pid),
        ("gpu", Some(std::process::id())),
        "{workers:?}"
    );
    assert!(inside.addr.ends_with("/gpu.sock"), "{inside:?}");
    assert_eq!(outside.role, "cpu");
    assert_ne!(outside.pid, Some(std::process::id()));

    let expected: BTreeMap<String, i64> = keys.into_iter().collect();
    let mut stream = loader.epoch(0).unwrap();
    let mut got = BTreeMap::new();
    while let Some(batch) = stream.next_batch().await {
        let batch = batch.unwrap();
        for (key, label) in batch.keys.iter().zip(&batch.labels) {
            assert!(got.insert(key.clone(), *label).is_none(), "{key} twice");
        }
    }
    assert_eq!(got, expected, "every sample exactly once");
    let report = stream.report();
    let mine = report.workers.iter().find(|w| w.addr == inside.addr).unwrap();
    assert!(mine.samples > 0 && mine.ring_samples > 0, "{:?}", report.workers);
    drop(stream);

    assert!(!joined.load(Ordering::SeqCst));
    let dir = std::path::Path::new(inside.addr.strip_prefix("unix:").unwrap())
        .parent()
        .unwrap()
        .to_owned();
    drop(loader);
    assert!(joined.load(Ordering::SeqCst), "the loader's drop stopped and joined it");
    let deadline = Instant::now() + Duration::from_secs(5);
    while dir.exists() {
        assert!(Instant::now() < deadline, "{} outlived its loader", dir.display());
        std::thread::sleep(Duration::from_millis(20));
    }

    // Without a GPU the worker's own start error reaches the caller.
    if stoker_client::device::probe(0).is_err() {
        let mut config = local_config(vec![LOCAL.into()], &shards);
        let local = config.local.as_mut().unwrap();
        local.gpu = Some(0);
        local.in_process = Some(in_process(false, Arc::new(AtomicBool::new(false))));
        let err = Loader::connect(config).await.unwrap_err().to_string();
        assert!(
            err.contains("local gpu worker in this process on cuda:0") && err.contains("no usable gpu"),
            "{err}"
        );
    }
}

/// Connects to a Unix socket as the user `uid` (a fresh process): the
/// error, or `None` when it connected.
fn connect_as(uid: u32, socket: &str) -> Option<String> {
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n    print(e)",
        socket,
    ]);
    if uid != 0 {
        cmd.uid(uid).gid(uid);
    }
    let out = cmd.stderr(Stdio::inherit()).output().expect("run python3");
    assert!(out.status.success(), "python3 as uid {uid} failed");
    let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (!said.is_empty()).then_some(said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_cannot_reach_the_local_workers() {
    let (_dir, shards, _) = dataset(16);
    let loader = Loader::connect(local_config(vec![LOCAL.into()], &shards))
        .await
        .unwrap();
    let worker = &loader.local_workers()[0];
    let socket = worker.addr.strip_prefix("unix:").unwrap();
    let dir = std::path::Path::new(socket).parent().unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    assert_eq!(mode(std::path::Path::new(socket)), 0o600, "{socket}");

    let euid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap());
    if euid != 0 {
        crate::support::Need::Root.skip(
            "another_user_cannot_reach_the_local_workers (the other-user check)",
            format!("running a process as another user needs root (euid {euid})"),
        );
        return;
    }
    // The owner connects: the check below can tell a refusal apart.
    assert_eq!(connect_as(0, socket), None, "the owner must reach its worker");
    const NOBODY: u32 = 65534;
    let refused = connect_as(NOBODY, socket).expect("another user connected to a local worker");
    assert!(refused.contains("Permission denied"), "{refused}");
}

/// The `stoker-PID-*` socket directories in `base`.
fn socket_dirs(base: &std::path::Path) -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(base)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("stoker-"))
        .collect();
    dirs.sort();
    dirs
}

/// A loader's process killed by SIGKILL takes its local workers with it;
/// the socket directory it could not remove is reclaimed by the next
/// loader's start, which leaves nothing behind when it ends.
#[test]
fn local_workers_end_with_their_process_even_when_it_is_killed() {
    let (_dir, shards, _) = dataset(40);
    let runtime = tempfile::tempdir().unwrap();
    let base = runtime.path().to_str().unwrap();
    let mut run = StreamChild::spawn_addrs_env(
        &[LOCAL],
        &shards,
        &["--batch-size", "8", "--epochs", "50", "--local-threads", "1"],
        &[("STOKER_LOG", "info"), ("XDG_RUNTIME_DIR", base)],
    );
    run.wait_for_samples(8, Duration::from_secs(60));
    let pid = run.wait_for_log("local worker started", Duration::from_secs(10));
    let pid: u32 = pid
        .split("pid=Some(")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {pid:?}"));
    assert!(alive(pid));
    let left = socket_dirs(runtime.path());
    assert_eq!(left.len(), 1, "{left:?}");
    run.kill();
    wait_gone(pid, Duration::from_secs(10), "its loader's process was SIGKILLed");
    assert_eq!(socket_dirs(runtime.path()), left, "SIGKILL leaves the directory");
    let next = StreamChild::spawn_addrs_env(
        &[LOCAL],
        &shards,
        &["--batch-size", "8", "--epochs", "1", "--local-threads", "1"],
        &[("XDG_RUNTIME_DIR", base)],
    )
    .finish();
    assert!(next.success(), "{}", next.stderr());
    assert_eq!(
        socket_dirs(runtime.path()),
        Vec::<String>::new(),
        "the next start reclaims the killed loader's directory and removes its own"
    );
}
