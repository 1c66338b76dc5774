//! The `stoker` Python package (client/python, installed into the test
//! venv by scripts/test.sh) against real worker processes: the numpy path,
//! since the test venv has no torch.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{
    ChildGuard, Worker, assert_exactly_once, image_folder_keys, pack, python, python_script, run_ok, signal,
    stream_addrs, synth_images,
};

#[test]
fn the_python_package_streams_every_sample_once_with_numpy() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 90, 3, 96, 72);
    pack(&images, shards.to_str().unwrap(), "40K", &[]);
    let expected = image_folder_keys(&images);
    let tsv = dir.path().join("expected.tsv");
    let lines: String = expected.iter().map(|(k, l)| format!("{k}\t{l}\n")).collect();
    std::fs::write(&tsv, lines).unwrap();
    let (w1, w2) = (Worker::start(1), Worker::start(1));
    let out = run_ok(
        python()
            .arg(python_script("package_check.py"))
            .arg(format!("{},{}", w1.addr, w2.addr))
            .arg(&shards)
            .arg(&tsv)
            .arg("16"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        stdout.contains("python package: 90 samples x 2 epochs exactly once"),
        "{stdout}"
    );
}

/// The package's `stoker` command: the console script beside the venv's
/// python, and `python -m stoker`.
fn console_script() -> std::path::PathBuf {
    let py = python().get_program().to_owned();
    std::path::Path::new(&py).with_file_name("stoker")
}

#[test]
fn the_python_package_is_the_whole_command_line() {
    // Every command in the help, from `python -m stoker`.
    let help = run_ok(python().args(["-m", "stoker", "--help"]));
    let help = String::from_utf8_lossy(&help.stdout);
    for command in [
        "worker",
        "stream",
        "pack",
        "synth",
        "bench",
        "demo",
        "doctor",
        "health",
        "augment",
        "transforms",
    ] {
        assert!(help.contains(command), "{command} missing from the help: {help}");
    }
    // An error: one line, exit code 1.
    let bad = python()
        .args([
            "-m",
            "stoker",
            "pack",
            "--input",
            "/nonexistent/stoker-in",
            "--output",
            "/tmp/stoker-out-x",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.starts_with("error: ") && stderr.contains("/nonexistent/stoker-in"),
        "{stderr}"
    );

    // A worker from the console script serves a stream from the binary,
    // and Ctrl-C stops it promptly, draining first.
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 30, 2, 96, 72);
    pack(&images, shards.to_str().unwrap(), "40K", &[]);
    let mut child = ChildGuard(
        std::process::Command::new(console_script())
            .args([
                "worker",
                "--threads",
                "1",
                "--listen",
                "127.0.0.1:0",
                "--grace-period",
                "1",
            ])
            .env("STOKER_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("stoker worker listening on ")
        .unwrap()
        .to_owned();
    let run = stream_addrs(
        &[addr],
        shards.to_str().unwrap(),
        &["--batch-size", "8", "--image-size", "32", "--epochs", "2"],
    );
    assert_exactly_once(&run, &image_folder_keys(&images), 0..2);
    let asked = Instant::now();
    signal(child.0.id(), "-INT");
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(asked.elapsed() < Duration::from_secs(10), "the worker ignored Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn an_in_process_worker_serves_like_a_worker_process() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 40, 2, 96, 72);
    pack(&images, shards.to_str().unwrap(), "40K", &[]);
    let tsv = dir.path().join("expected.tsv");
    let lines: String = image_folder_keys(&images)
        .iter()
        .map(|(k, l)| format!("{k}\t{l}\n"))
        .collect();
    std::fs::write(&tsv, lines).unwrap();
    let process = Worker::start(1);
    let out = run_ok(
        python()
            .arg(python_script("inprocess_check.py"))
            .arg(&process.addr)
            .arg(&shards)
            .arg(&tsv),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("in-process worker: 40 samples x 2 epochs exactly once"),
        "{stdout}"
    );
}

#[test]
fn the_python_package_raises_past_the_error_budget_and_pads_within_it() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 20, 2, 64, 48);
    // One image that is no JPEG past its magic bytes, under a name that
    // says it is one (pack flags it and packs it; workers skip it).
    std::fs::write(
        images.join("class_001/zz_broken.jpg"),
        b"\xff\xd8\xff this is not a jpeg",
    )
    .unwrap();
    pack(&images, shards.to_str().unwrap(), "1M", &[]);
    let w = Worker::start(1);
    let script = r#"
import sys, stoker
def run(budget):
    loader = stoker.Loader(workers=sys.argv[1], dataset=sys.argv[2], batch_size=4, image_size=32,
                           max_errors=budget, last_batch="partial")
    real = padded = batches = 0
    for b in loader:
        batches += 1
        padded += b["padded"]
        real += len(b["key"]) - b["padded"]
    return f"batches {batches} of {len(loader)}, real {real}, padded {padded}"
try:
    run(0)
except stoker.StokerError as e:
    print("budget 0:", e)
else:
    print("budget 0: no error")
print("budget 1:", run(1))
"#;
    let out = run_ok(python().arg("-c").arg(script).arg(&w.addr).arg(&shards));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        stdout.contains("budget 0: error budget exceeded") && stdout.contains("class_001/zz_broken"),
        "{stdout}"
    );
    // 21 samples, one skipped: still the 6 batches the index says; the
    // last one, left with no real sample, is made up of padding.
    assert!(
        stdout.contains("budget 1: batches 6 of 6, real 20, padded 4"),
        "{stdout}"
    );
}

#[test]
fn a_python_loader_gives_up_on_a_worker_that_never_answers_after_its_connect_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 8, 2, 64, 48);
    pack(&images, shards.to_str().unwrap(), "1M", &[]);
    let w = Worker::start(1);
    crate::support::signal(w.child.0.id(), "-STOP");
    let script = r#"
import sys, time, stoker
t0 = time.monotonic()
try:
    stoker.Loader(workers=sys.argv[1], dataset=sys.argv[2], batch_size=4, image_size=32, connect_timeout=1)
except stoker.StokerError as e:
    print(f"refused after {time.monotonic() - t0:.1f}s: {e}", flush=True)
"#;
    let out = run_ok(python().arg("-c").arg(script).arg(&w.addr).arg(&shards));
    crate::support::signal(w.child.0.id(), "-CONT");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("refused after") && stdout.contains(&w.addr) && stdout.contains("no answer within 1.0s"),
        "{stdout}"
    );
    let secs: f64 = stdout["refused after ".len()..]
        .split('s')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(secs < 5.0, "{stdout}");
}

#[test]
fn ctrl_c_interrupts_a_python_loader_waiting_for_a_stalled_worker() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 16, 2, 64, 48);
    pack(&images, shards.to_str().unwrap(), "1M", &[]);
    let w = Worker::start(1);
    // Connected, the script stops the worker (SIGSTOP) before asking for
    // work: the loader then waits for a first batch that never comes.
    // The loader says, at debug level, when the thread is in its wait
    // (stoker::wait): the signal goes in then, not at a guess.
    let script = r#"
import logging, os, signal, sys, time, stoker
logging.basicConfig(stream=sys.stdout, level=logging.DEBUG, format="log %(message)s")
loader = stoker.Loader(workers=sys.argv[1], dataset=sys.argv[2], batch_size=4, image_size=32,
                       progress_timeout=600)
os.kill(int(sys.argv[3]), signal.SIGSTOP)
print("waiting", flush=True)
t0 = time.monotonic()
try:
    for b in loader:
        print("unexpected batch", flush=True)
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - t0:.1f}s", flush=True)
    print("state epoch", loader.state_dict()["epoch"], flush=True)
"#;
    let mut child = python()
        .arg("-c")
        .arg(script)
        .arg(&w.addr)
        .arg(&shards)
        .arg(w.child.0.id().to_string())
        .env("STOKER_LOG", "warn,stoker::wait=debug")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = wait_for_line(&mut child, "log waiting for the next batch");
    let sent = std::time::Instant::now();
    crate::support::signal(child.id(), "-INT");
    let status = child.wait().unwrap();
    let took = sent.elapsed();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    crate::support::signal(w.child.0.id(), "-CONT");
    assert!(status.success(), "{status:?}: {rest}");
    assert!(
        rest.contains("interrupted after") && rest.contains("state epoch 0"),
        "{rest}"
    );
    // The wait checks for signals every 200 ms.
    assert!(took < std::time::Duration::from_secs(3), "Ctrl-C took {took:?}");
}

#[test]
fn a_python_loader_starts_its_own_local_workers_and_is_never_silent() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 40, 3, 64, 48);
    pack(&images, shards.to_str().unwrap(), "40K", &[]);
    let tsv = dir.path().join("expected.tsv");
    let lines: String = image_folder_keys(&images)
        .iter()
        .map(|(k, l)| format!("{k}\t{l}\n"))
        .collect();
    std::fs::write(&tsv, lines).unwrap();
    // A peer that speaks HTTP/1, not gRPC.
    let port = crate::support::free_port();
    let mut http = ChildGuard(
        python()
            .args(["-u", "-m", "http.server", &port.to_string(), "--bind", "127.0.0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut banner = String::new();
    BufReader::new(http.0.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let out = run_ok(
        python()
            .arg(python_script("local_check.py"))
            .arg(&shards)
            .arg(&tsv)
            .arg(format!("127.0.0.1:{port}")),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    for line in [
        "local workers: 40 samples x 2 epochs exactly once from a relative path; stopped with the loader",
        "state_dict(through_index=...): a resume after a batch fetched ahead has the rest exactly once",
        "never silent: ",
        "config errors: ",
        "optional fields: ",
        "not a worker: ",
    ] {
        assert!(stdout.contains(line), "{line:?} missing: {stdout}");
    }
}

#[test]
fn ctrl_c_interrupts_the_python_constructor_within_its_signal_check() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 8, 2, 64, 48);
    pack(&images, shards.to_str().unwrap(), "1M", &[]);
    let w = Worker::start(1);
    signal(w.child.0.id(), "-STOP");
    // The worker accepts (the kernel does) and never answers: the
    // constructor would wait its whole connect_timeout.
    let script = r#"
import logging, sys, time, stoker
logging.basicConfig(stream=sys.stdout, level=logging.DEBUG, format="log %(message)s")
print("constructing", flush=True)
t0 = time.monotonic()
try:
    stoker.Loader(workers=sys.argv[1], dataset=sys.argv[2], batch_size=4, image_size=32, connect_timeout=120)
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - t0:.1f}s", flush=True)
"#;
    let mut child = python()
        .arg("-c")
        .arg(script)
        .arg(&w.addr)
        .arg(&shards)
        .env("STOKER_LOG", "warn,stoker::wait=debug")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = wait_for_line(&mut child, "log waiting for the workers to answer");
    let sent = Instant::now();
    signal(child.id(), "-INT");
    let status = child.wait().unwrap();
    let took = sent.elapsed();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    signal(w.child.0.id(), "-CONT");
    assert!(
        status.success() && rest.contains("interrupted after"),
        "{status:?}: {rest}"
    );
    // Signals are checked every 100 ms; the process then exits at once.
    assert!(took < Duration::from_millis(1500), "Ctrl-C took {took:?}");
    println!("constructor interrupted; process gone {took:?} after SIGINT");
}

/// Ctrl-C that lands while a `logging` handler runs the client's log
/// (Python raises KeyboardInterrupt inside the handler) still interrupts
/// the wait: it is not lost as an unraisable error, leaving the
/// constructor to its connect timeout (seen once under load in CI).
#[test]
fn ctrl_c_inside_a_logging_handler_still_interrupts_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 8, 2, 64, 48);
    pack(&images, shards.to_str().unwrap(), "1M", &[]);
    let w = Worker::start(1);
    signal(w.child.0.id(), "-STOP");
    // The handler sends SIGINT to its own process on the wait's message:
    // Python runs the signal handler inside this emit.
    let script = r#"
import logging, os, signal, sys, time, stoker
class Interrupting(logging.Handler):
    def emit(self, record):
        if "Ctrl-C interrupts the wait" in record.getMessage():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
logging.getLogger("stoker").addHandler(Interrupting())
logging.getLogger("stoker").setLevel(logging.DEBUG)
t0 = time.monotonic()
try:
    stoker.Loader(workers=sys.argv[1], dataset=sys.argv[2], batch_size=4, image_size=32, connect_timeout=60)
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - t0:.1f}s", flush=True)
"#;
    let started = Instant::now();
    let out = python()
        .arg("-c")
        .arg(script)
        .arg(&w.addr)
        .arg(&shards)
        .env("STOKER_LOG", "warn,stoker::wait=debug")
        .output()
        .unwrap();
    let took = started.elapsed();
    signal(w.child.0.id(), "-CONT");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("interrupted after"),
        "{:?}: {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(took < Duration::from_secs(20), "Ctrl-C took {took:?}");
    println!("{}", stdout.trim());
}

/// `scripts/wheel.sh` on a fresh clone, with no test venv (target/pyenv)
/// and no `$PYTHON`: it finds a Python with pip on the PATH instead of
/// failing on the venv that `scripts/test.sh` makes.
#[test]
fn wheel_sh_finds_its_python_on_a_fresh_clone() {
    let clone = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(clone.path().join("scripts")).unwrap();
    let script = clone.path().join("scripts/wheel.sh");
    std::fs::copy(crate::support::repo_root().join("scripts/wheel.sh"), &script).unwrap();
    let out = run_ok(
        std::process::Command::new("bash")
            .arg(&script)
            .arg("--print-python")
            .env_remove("PYTHON")
            .current_dir(clone.path()),
    );
    let found = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(!found.contains("target/pyenv"), "{found}");
    let pip = std::process::Command::new(&found)
        .args(["-m", "pip", "--version"])
        .output()
        .unwrap();
    assert!(pip.status.success(), "{found} has no pip");
}

/// The package's stubs against the built module: `mypy.stubtest` finds
/// every name, parameter, default and kind of `_stoker.pyi` (written by
/// hand from the PyO3 signatures) and `transforms.pyi` (generated) in the
/// installed extension and package, and nothing public missing from them;
/// client/python/stubtest_allowlist.txt names what it cannot judge, each
/// with its reason. Fails with stubtest's report.
#[test]
fn the_stubs_match_the_built_module_by_stubtest() {
    let allowlist = crate::support::repo_root().join("client/python/stubtest_allowlist.txt");
    let out = run_ok(
        python()
            .args([
                "-m",
                "mypy.stubtest",
                "stoker._stoker",
                "stoker.transforms",
                "--allowlist",
            ])
            .arg(&allowlist),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Success: no issues found"), "{stdout}");
}

/// The Loader's settings cross into the extension as one dict
/// (client/python/src/options.rs): its keys, nested dicts included, are
/// the same in `_stoker.pyi`'s `TypedDict`s (which stubtest cannot see),
/// in the dict the Loader builds and in what the extension reads, which
/// refuses the dict without any one of them, naming it.
#[test]
fn the_loaders_options_name_the_same_keys_in_the_stub_the_loader_and_the_extension() {
    let out = run_ok(python().arg(python_script("options_check.py")));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("agree in the stub, the Loader and the extension"),
        "{stdout}"
    );
}

/// Reads `child`'s stdout on a thread up to a line that starts with
/// `prefix`, for at most 30 s, and returns the rest of it; on its end or
/// the deadline first, kills `child` and fails with what came.
fn wait_for_line(child: &mut std::process::Child, prefix: &str) -> BufReader<std::process::ChildStdout> {
    let out = BufReader::new(child.stdout.take().expect("the child's stdout is piped"));
    let (tx, rx) = std::sync::mpsc::channel();
    let wanted = prefix.to_owned();
    std::thread::spawn(move || {
        let mut out = out;
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            match out.read_line(&mut line) {
                Ok(n) if n > 0 && line.starts_with(&wanted) => {
                    let _ = tx.send(Ok(out));
                    return;
                }
                Ok(n) if n > 0 => seen.push_str(&line),
                _ => {
                    let _ = tx.send(Err(seen));
                    return;
                }
            }
        }
    });
    let failed = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(out)) => return out,
        Ok(Err(seen)) => format!("the script ended before printing {prefix:?}: {seen}"),
        Err(_) => format!("no line {prefix:?} from the script within 30 s"),
    };
    let _ = child.kill();
    panic!("{failed}");
}
