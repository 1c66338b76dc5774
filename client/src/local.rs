//! Local workers: the `"local"` entry of the worker list starts worker
//! processes on this host and supervises them for the loader's lifetime.
//!
//! - A CPU worker takes the cores the trainer does not use; with a
//!   training GPU, a GPU worker runs on it too (`--gpu-only`, so it leaves
//!   the cores to the CPU worker). Where the caller can start a worker in
//!   this process ([`LocalWorkers::in_process`]: the Python package), the
//!   GPU worker runs here, its lanes on the trainer's own (primary) CUDA
//!   context: two processes on one GPU take turns on it, while work in the
//!   trainer's process overlaps the training step's, as DALI's does.
//! - Each listens on a Unix domain socket in a directory of its own that
//!   only this user may enter (mode 0700; the socket 0600): another user's
//!   process on a shared node cannot connect, so cannot make them read what
//!   this user's credentials reach.
//! - A worker that dies is started again on the same socket, after a pause
//!   that grows while it keeps dying; meanwhile its items go to the others,
//!   as a remote worker's do.
//! - They stop with the loader, and with this process however it ends:
//!   each holds the read end of a pipe whose write end only this process
//!   has (`--stop-on-stdin-eof`), and its own process group, so a
//!   terminal's Ctrl-C reaches the trainer alone.
//!
//! The command is the `stoker` binary or `python -m stoker`
//! (`LocalWorkers::command`); the workers' stderr goes to the log. The
//! in-process GPU worker takes `--gpu-ordinal` and `--gpu-only` and no
//! grace period; it is watched, not restarted, and stopped (joined) when
//! the fleet drops.
//!
//! Being on this host, they write samples into the loader's shared-memory
//! ring rather than sending them; the in-process GPU worker, on the
//! loader's device, leaves the images its lanes finish on the device
//! (`stoker_cuda::handoff`).

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stoker_proto::transport::UNIX_SCHEME;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tracing::{info, warn};

use crate::error::ClientError;

/// The worker-list entry that stands for the local workers.
pub const LOCAL: &str = "local";

/// How long a local worker may take to listen (a GPU worker opens CUDA
/// and nvJPEG first).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Pauses between restarts of a worker that keeps dying: doubled from the
/// first up to the last, and back to the first after a run this long.
const RESTART_PAUSE: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(10));
const STABLE_RUN: Duration = Duration::from_secs(30);
/// How often the fleet looks whether its in-process worker still runs.
const IN_PROCESS_WATCH: Duration = Duration::from_millis(500);
/// Lines of a worker's standard error kept to explain a failed start.
const STDERR_TAIL: usize = 20;
/// What a worker prints once it listens (`stoker worker`).
const READY_LINE: &str = "stoker worker listening on ";

/// How to run the local workers.
#[derive(Debug, Clone, Default)]
pub struct LocalWorkers {
    /// The program that is the `stoker` command line, and its first
    /// arguments: the `stoker` binary, or `python -m stoker`. `worker` and
    /// its flags follow.
    pub command: Vec<OsString>,
    /// Threads of the CPU worker; `None`: this host's cores (as the
    /// process may use them) shared among the node's ranks
    /// (`LOCAL_WORLD_SIZE`), less one for the training loop.
    pub threads: Option<usize>,
    /// The CUDA device training runs on: a GPU worker runs there too.
    pub gpu: Option<usize>,
    /// More `stoker worker` flags, for every local worker.
    pub args: Vec<String>,
    /// Starts the GPU worker inside this process; `None`: as a process.
    pub in_process: Option<InProcessStart>,
}

/// A worker running inside this process; dropping it stops it (at once:
/// its only client is going away).
pub trait InProcessWorker: Send + Sync {
    /// Whether it has stopped by itself (its thread ended).
    fn is_finished(&self) -> bool;
}

/// Starts a worker inside this process with `stoker worker`'s arguments
/// and returns once it listens, or with its start-up error. The Python
/// extension passes `stoker_cli`'s embedded worker: this crate does not
/// link the worker.
#[derive(Clone)]
pub struct InProcessStart(pub Arc<StartInProcess>);

/// What [`InProcessStart`] calls: `stoker worker`'s arguments in, the
/// running worker or why it did not start out.
pub type StartInProcess = dyn Fn(Vec<String>) -> Result<Box<dyn InProcessWorker>, String> + Send + Sync;

impl std::fmt::Debug for InProcessStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InProcessStart")
    }
}

impl LocalWorkers {
    /// A configuration running `command` (see [`Self::command`]).
    pub fn new(command: Vec<OsString>) -> Self {
        Self {
            command,
            ..Self::default()
        }
    }

    /// The CPU worker's threads.
    pub fn cpu_threads(&self) -> usize {
        self.threads.unwrap_or_else(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let ranks = std::env::var("LOCAL_WORLD_SIZE")
                .ok()
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&n| n > 0)
                .unwrap_or(1);
            (cores / ranks).saturating_sub(1).max(1)
        })
    }
}

/// One supervised worker, as the loader and its users see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalWorker {
    /// `unix:PATH`, as in the worker list.
    pub addr: String,
    /// `cpu` or `gpu`.
    pub role: &'static str,
    /// Its process now (this process for one running in it); `None` while
    /// it is being started again, or once one in this process stopped.
    pub pid: Option<u32>,
    /// Whether it runs inside this process.
    pub in_process: bool,
    /// Times it was started again after dying.
    pub restarts: u32,
}

/// The running local workers; dropping it stops them.
#[derive(Debug)]
pub(crate) struct LocalFleet {
    workers: Vec<Arc<Mutex<LocalWorker>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The worker running in this process, if any; stopped on drop.
    _in_process: Option<Arc<dyn InProcessWorker>>,
    /// The private directory of the sockets; removed last.
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for dyn InProcessWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InProcessWorker")
    }
}

/// One worker's launch: its arguments and environment.
#[derive(Debug, Clone)]
struct Launch {
    command: Vec<OsString>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    socket: PathBuf,
    role: &'static str,
}

impl LocalFleet {
    /// Starts the workers `config` describes and returns once each
    /// listens; a worker that cannot start fails this with its own error.
    pub async fn start(config: &LocalWorkers) -> Result<Self, ClientError> {
        if config.command.is_empty() {
            return Err(ClientError::Config(format!(
                "workers {LOCAL:?}: no command to start `stoker worker` with (LocalWorkers::command)"
            )));
        }
        let dir = private_dir()?;
        let mut launches = vec![Launch {
            command: config.command.clone(),
            args: worker_args(
                &["--device", "cpu", "--threads", &config.cpu_threads().to_string()],
                &config.args,
            ),
            env: Vec::new(),
            socket: dir.path().join("cpu.sock"),
            role: "cpu",
        }];
        let mut in_process = None;
        let mut workers = Vec::new();
        let mut tasks = Vec::new();
        if let (Some(ordinal), Some(start)) = (config.gpu, &config.in_process) {
            let (worker, state) = start_in_process(start, ordinal, &dir.path().join("gpu.sock"), &config.args).await?;
            tasks.push(tokio::spawn(watch_in_process(
                Arc::downgrade(&worker),
                Arc::clone(&state),
            )));
            workers.push(state);
            in_process = Some(worker);
        } else if let Some(ordinal) = config.gpu {
            launches.push(Launch {
                command: config.command.clone(),
                args: worker_args(&["--device", "cuda", "--gpu-only"], &config.args),
                env: vec![("CUDA_VISIBLE_DEVICES".to_owned(), visible_device(ordinal))],
                socket: dir.path().join("gpu.sock"),
                role: "gpu",
            });
        }
        for launch in launches {
            // Started one after the other: each start's error is its own.
            let running = spawn(&launch).await?;
            let state = Arc::new(Mutex::new(LocalWorker {
                addr: launch.addr(),
                role: launch.role,
                pid: running.child.id(),
                restarts: 0,
                in_process: false,
            }));
            info!(worker = %launch.addr(), role = launch.role, pid = ?running.child.id(), "local worker started");
            tasks.push(tokio::spawn(supervise(launch, running, Arc::clone(&state))));
            workers.push(state);
        }
        Ok(Self {
            workers,
            tasks,
            _in_process: in_process,
            _dir: dir,
        })
    }

    /// The workers' addresses, for the worker list.
    pub fn addrs(&self) -> Vec<String> {
        self.workers().into_iter().map(|w| w.addr).collect()
    }

    /// The workers as they are now.
    pub fn workers(&self) -> Vec<LocalWorker> {
        self.workers
            .iter()
            .map(|w| w.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .collect()
    }
}

impl Drop for LocalFleet {
    /// Ends supervision: each task's end kills its worker (SIGKILL: its
    /// only client is going away, and nothing it holds needs saving).
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Launch {
    fn addr(&self) -> String {
        format!("{UNIX_SCHEME}{}", self.socket.display())
    }
}

/// Starts the GPU worker in this process on the trainer's device
/// `ordinal` (numbered as this process sees devices), listening on
/// `socket`: `--gpu-only` (the CPU worker has the cores), its lanes on the
/// share of the SMs [`local_gpu_sms`] gives, and no grace period (when the
/// fleet stops, its only client is gone).
async fn start_in_process(
    start: &InProcessStart,
    ordinal: usize,
    socket: &Path,
    more: &[String],
) -> Result<(Arc<dyn InProcessWorker>, Arc<Mutex<LocalWorker>>), ClientError> {
    let addr = format!("{UNIX_SCHEME}{}", socket.display());
    let ordinal_arg = ordinal.to_string();
    let sms = local_gpu_sms();
    let own = [
        "--listen",
        &addr,
        "--device",
        "cuda",
        "--gpu-ordinal",
        &ordinal_arg,
        "--gpu-only",
        "--gpu-sms",
        &sms,
        "--grace-period",
        "0",
    ];
    let args = worker_args(&own, more);
    let start = start.clone();
    let failed =
        |why: String| ClientError::Config(format!("local gpu worker in this process on cuda:{ordinal}: {why}"));
    // It opens CUDA and nvJPEG before it listens: off the runtime's
    // threads, and bounded as a worker process's start is (one that comes
    // up later is dropped with its task's result, which stops it).
    let started = tokio::time::timeout(START_TIMEOUT, tokio::task::spawn_blocking(move || (start.0)(args)))
        .await
        .map_err(|_| failed(format!("did not listen within {}s", START_TIMEOUT.as_secs())))?;
    let worker = started
        .map_err(|e| failed(format!("its start panicked: {e}")))?
        .map_err(failed)?;
    info!(worker = %addr, ordinal, "local gpu worker started in this process");
    let state = Arc::new(Mutex::new(LocalWorker {
        addr,
        role: "gpu",
        pid: Some(std::process::id()),
        restarts: 0,
        in_process: true,
    }));
    Ok((Arc::from(worker), state))
}

/// Notices the in-process worker's end (an error it could not serve on),
/// which is not restarted: what failed it would fail it again. Its items
/// go to the other workers, as a lost worker's do.
async fn watch_in_process(worker: std::sync::Weak<dyn InProcessWorker>, state: Arc<Mutex<LocalWorker>>) {
    loop {
        tokio::time::sleep(IN_PROCESS_WATCH).await;
        let Some(w) = worker.upgrade() else { return };
        if w.is_finished() {
            let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
            s.pid = None;
            warn!(worker = %s.addr, "the local gpu worker in this process stopped (its error is logged above); its items go to the other workers");
            return;
        }
    }
}

/// The `--gpu-sms` of a GPU worker in the training process:
/// `STOKER_LOCAL_GPU_SMS` when set (`all`, `auto` or a count), else `all`.
/// Confined lanes (`auto`) are the user's choice: beside ResNet-18 they
/// measured 0.72x of synthetic against 0.70x on every SM (2 rounds), and
/// a loader dropped in the trainer's process left 448 MiB of the pool
/// reserved (H200; every SM: nothing), for a cause not found yet
/// (docs/gpu.md).
pub fn local_gpu_sms() -> String {
    std::env::var(LOCAL_GPU_SMS_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "all".to_owned())
}

/// The variable [`local_gpu_sms`] reads.
pub const LOCAL_GPU_SMS_ENV: &str = "STOKER_LOCAL_GPU_SMS";

fn worker_args(own: &[&str], more: &[String]) -> Vec<String> {
    own.iter()
        .map(|s| (*s).to_owned())
        .chain(more.iter().cloned())
        .collect()
}

/// `CUDA_VISIBLE_DEVICES` for a worker on the trainer's device `ordinal`,
/// which is numbered among this process's visible devices.
fn visible_device(ordinal: usize) -> String {
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(list) if !list.trim().is_empty() => list
            .split(',')
            .nth(ordinal)
            .map_or_else(|| ordinal.to_string(), |d| d.trim().to_owned()),
        _ => ordinal.to_string(),
    }
}

/// A directory only this user can enter, for the sockets: under
/// `$XDG_RUNTIME_DIR` when set (itself private), else the temporary
/// directory. Its name carries this process's id (`stoker-PID-XXXXXX`): a
/// process killed by a signal it cannot catch leaves its directory behind,
/// and the next start reclaims the directories of processes that are gone.
fn private_dir() -> Result<tempfile::TempDir, ClientError> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    reclaim_dirs_of_dead_processes(&base);
    let dir = tempfile::Builder::new()
        .prefix(&format!("stoker-{}-", std::process::id()))
        .tempdir_in(&base)
        .map_err(|e| {
            ClientError::Config(format!(
                "local workers: cannot make a directory in {}: {e}",
                base.display()
            ))
        })?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).map_err(|e| {
        ClientError::Config(format!(
            "local workers: cannot make {} private: {e}",
            dir.path().display()
        ))
    })?;
    Ok(dir)
}

/// Removes the `stoker-PID-*` directories in `base` of this user whose
/// process no longer runs (Linux: no `/proc/PID`). What cannot be removed
/// is left, with a debug line: it costs a directory, nothing else.
fn reclaim_dirs_of_dead_processes(base: &Path) {
    use std::os::unix::fs::MetadataExt;
    // This process's /proc entry is owned by its user.
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("stoker-"))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let ours = entry.metadata().is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if !ours || Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => {
                tracing::debug!(dir = %entry.path().display(), pid, "removed a dead process's local worker directory")
            }
            Err(e) => {
                tracing::debug!(dir = %entry.path().display(), error = %e, "cannot remove a dead process's local worker directory")
            }
        }
    }
}

/// A started worker: the process and the pipe that keeps it alive.
struct Running {
    child: Child,
    _lifeline: ChildStdin,
    started: Instant,
}

/// Starts one worker and waits until it listens. Its standard error goes
/// to this process's log, at WARNING and above unless `STOKER_LOG` says
/// otherwise.
async fn spawn(launch: &Launch) -> Result<Running, ClientError> {
    let addr = launch.addr();
    // A socket left by a worker that was killed.
    let _ = std::fs::remove_file(&launch.socket);
    let mut cmd = Command::new(&launch.command[0]);
    cmd.args(&launch.command[1..])
        .arg("worker")
        .arg("--listen")
        .arg(&addr)
        .arg("--stop-on-stdin-eof")
        .args(&launch.args)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if std::env::var_os("STOKER_LOG").is_none() {
        // Not the worker's skip summaries (`stoker_skips`): this client
        // reports the skips it receives, once.
        cmd.env("STOKER_LOG", "warn,stoker_skips=off");
    }
    let failed = |why: String| ClientError::Config(format!("local {} worker on {addr}: {why}", launch.role));
    let mut child = cmd
        .spawn()
        .map_err(|e| failed(format!("cannot run {}: {e}", Path::new(&launch.command[0]).display())))?;
    let lifeline = child.stdin.take().ok_or_else(|| failed("no stdin pipe".into()))?;
    let stdout = child.stdout.take().ok_or_else(|| failed("no stdout pipe".into()))?;
    let stderr = child.stderr.take().ok_or_else(|| failed("no stderr pipe".into()))?;
    let tail = Arc::new(Mutex::new(std::collections::VecDeque::new()));
    tokio::spawn(forward_stderr(addr.clone(), stderr, Arc::clone(&tail)));
    let mut lines = BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(START_TIMEOUT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with(READY_LINE) {
                return true;
            }
        }
        false
    })
    .await;
    // The rest of its standard output is read and dropped, so that it
    // never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    match ready {
        Ok(true) => Ok(Running {
            child,
            _lifeline: lifeline,
            started: Instant::now(),
        }),
        Ok(false) => {
            let status = child.wait().await.map_or_else(|e| e.to_string(), |s| s.to_string());
            // Its last words arrive with its exit; give the reader a moment.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let said: Vec<String> = tail.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect();
            Err(failed(format!(
                "exited before it listened ({status}): {}",
                said.join(" | ")
            )))
        }
        Err(_) => Err(failed(format!("did not listen within {}s", START_TIMEOUT.as_secs()))),
    }
}

/// Logs a worker's standard error line by line, keeping the last lines.
async fn forward_stderr(
    addr: String,
    stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<std::collections::VecDeque<String>>>,
) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim().is_empty() {
            continue;
        }
        warn!(worker = %addr, "local worker: {line}");
        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
        if t.len() == STDERR_TAIL {
            t.pop_front();
        }
        t.push_back(line);
    }
}

/// Watches one worker until the fleet is dropped (which aborts this
/// task): one that exits is started again, after a pause that doubles
/// while it keeps dying young.
async fn supervise(launch: Launch, mut running: Running, state: Arc<Mutex<LocalWorker>>) {
    let mut pause = RESTART_PAUSE.0;
    loop {
        let status = running.child.wait().await;
        let lived = running.started.elapsed();
        state.lock().unwrap_or_else(|p| p.into_inner()).pid = None;
        let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
        warn!(worker = %launch.addr(), %status, lived_s = lived.as_secs_f64(), "local worker exited; its items go to the other workers while it starts again");
        if lived >= STABLE_RUN {
            pause = RESTART_PAUSE.0;
        }
        running = loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RESTART_PAUSE.1);
            match spawn(&launch).await {
                Ok(r) => break r,
                Err(e) => warn!(error = %e, "cannot start a local worker again; trying later"),
            }
        };
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        s.pid = running.child.id();
        s.restarts += 1;
        info!(worker = %s.addr, pid = ?s.pid, restarts = s.restarts, "local worker started again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_leave_the_trainer_a_core_and_visible_devices_are_mapped() {
        let mut local = LocalWorkers::new(vec!["stoker".into()]);
        local.threads = Some(3);
        assert_eq!(local.cpu_threads(), 3);
        local.threads = None;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // LOCAL_WORLD_SIZE is not set under the test runner.
        if std::env::var_os("LOCAL_WORLD_SIZE").is_none() {
            assert_eq!(local.cpu_threads(), cores.saturating_sub(1).max(1));
        }
        assert_eq!(
            worker_args(&["--device", "cpu"], &["--x".to_owned()]),
            ["--device", "cpu", "--x"]
        );
    }

    #[test]
    fn the_socket_directory_is_private() {
        let dir = private_dir().unwrap();
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "mode {mode:o}");
    }
}
