//! The local cluster, deploy/compose.yaml, run for real with docker-compose:
//! the images deploy/docker/build.sh makes (on the local base image, since
//! no registry can be reached here), s3s-fs in its container, the fill job,
//! CPU workers, Prometheus (Debian's build standing in for prom/prometheus,
//! scripts/prometheus.sh) and the trainer, which finds the workers by
//! `dns://worker:50051` through Docker's DNS. Each test checks exactly-once
//! from the trainer's `--keys-out`, and that `down -v` leaves nothing behind.
//!
//! The tests run one at a time (.config/nextest.toml) and skip, saying why,
//! without Docker, docker-compose or the local images.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::support::{
    DOCKER_BASE, DOCKER_TAG, StreamRun, assert_exactly_once, build_images, docker, http_get, http_get_json,
    image_folder_keys, pack, repo_root, stream_addrs, synth_images, try_get,
};

const PROMETHEUS: &str = "stoker-prometheus:local";
const WORKER_SAMPLES_SENT: &str = "stoker_worker_samples_sent_total";

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        ))
    }
}

/// Why the cluster cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    if let Err(e) = docker(&["info", "--format", "{{.ServerVersion}}"]) {
        return Some(format!("no Docker engine ({e})"));
    }
    if let Err(e) = run(Command::new("docker-compose").arg("version")) {
        return Some(format!("no docker-compose ({e})"));
    }
    for image in [DOCKER_BASE, PROMETHEUS] {
        if docker(&["image", "inspect", image]).is_err() {
            return Some(format!(
                "no image {image}; scripts/test.sh makes it where Docker runs as root"
            ));
        }
    }
    None
}

/// One docker-compose project of deploy/compose.yaml; `down -v` on drop.
struct Cluster {
    project: String,
    env: Vec<(String, String)>,
    /// The demo dataset's keys and labels, from `stoker synth` with the
    /// fill job's arguments.
    expected: Vec<(String, i64)>,
    down: bool,
}

impl Cluster {
    /// Starts s3, fill, `workers` workers and Prometheus (not the trainer).
    fn up(name: &str, images: usize, workers: usize, env: &[(&str, &str)]) -> Self {
        build_images();
        let mut all: Vec<(String, String)> = vec![
            ("STOKER_TAG".into(), DOCKER_TAG.into()),
            ("STOKER_PROMETHEUS_IMAGE".into(), PROMETHEUS.into()),
            (
                "STOKER_PROMETHEUS_PORT".into(),
                format!("127.0.0.1:{}", crate::support::free_port()),
            ),
            ("STOKER_DEMO_IMAGES".into(), images.to_string()),
            ("STOKER_DEMO_CLASSES".into(), "4".into()),
            ("STOKER_DEMO_SHARD_SIZE".into(), "1M".into()),
            ("STOKER_LOG".into(), "info".into()),
        ];
        all.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        // The keys do not depend on the images' size: small ones are quick.
        let dir = tempfile::tempdir().unwrap();
        synth_images(dir.path(), images, 4, 16, 12);
        let cluster = Self {
            project: format!("stoker-{name}-{}", std::process::id()),
            env: all,
            expected: image_folder_keys(dir.path()),
            down: false,
        };
        let scale = format!("worker={workers}");
        cluster
            .compose(&["up", "-d", "--scale", &scale, "s3", "fill", "worker", "prometheus"])
            .unwrap();
        cluster.wait_healthy("worker", workers, Duration::from_secs(120));
        cluster
    }

    fn compose_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("docker-compose");
        cmd.arg("-f")
            .arg(repo_root().join("deploy/compose.yaml"))
            .args(["-p", &self.project])
            .args(args);
        // Only what the test sets: none of the caller's STOKER_* or AWS_*.
        for (k, _) in std::env::vars() {
            if k.starts_with("STOKER_") || k.starts_with("AWS_") {
                cmd.env_remove(k);
            }
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    fn compose(&self, args: &[&str]) -> Result<String, String> {
        run(&mut self.compose_command(args))
    }

    /// The service's containers, in their compose index order.
    fn containers(&self, service: &str) -> Vec<String> {
        let out = docker(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=com.docker.compose.project={}", self.project),
            "--filter",
            &format!("label=com.docker.compose.service={service}"),
            "--format",
            "{{.Label \"com.docker.compose.container-number\"}} {{.ID}}",
        ])
        .unwrap();
        let mut found: Vec<(u32, String)> = out
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(n, id)| (n.parse().unwrap_or(0), id.to_owned()))
            .collect();
        found.sort();
        found.into_iter().map(|(_, id)| id).collect()
    }

    fn wait_healthy(&self, service: &str, n: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let states: Vec<String> = self
                .containers(service)
                .iter()
                .map(|c| docker(&["inspect", "--format", "{{.State.Health.Status}}", c]).unwrap_or_default())
                .collect();
            if states.len() == n && states.iter().all(|s| s == "healthy") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{service}: {states:?} after {limit:?}, wanted {n} healthy\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn logs(&self) -> String {
        self.compose(&["logs", "--no-color", "--tail", "40"])
            .unwrap_or_else(|e| e)
    }

    /// The container's address on the cluster's network (the host reaches
    /// it directly on Linux).
    fn ip(&self, container: &str) -> String {
        docker(&[
            "inspect",
            "--format",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            container,
        ])
        .unwrap()
    }

    /// Starts the trainer (detached), again if it ran before.
    fn start_trainer(&self) -> String {
        self.start_trainer_with(&[])
    }

    /// [`Cluster::start_trainer`] with more settings.
    fn start_trainer_with(&self, env: &[(&str, &str)]) -> String {
        let mut cmd = self.compose_command(&["up", "-d", "--no-deps", "--force-recreate", "trainer"]);
        cmd.envs(env.iter().copied());
        run(&mut cmd).unwrap();
        self.containers("trainer").pop().expect("a trainer container")
    }

    /// Samples the trainer has received so far (its metrics endpoint):
    /// `None` once it has exited.
    fn trainer_samples(&self, trainer: &str) -> Option<u64> {
        if docker(&["inspect", "--format", "{{.State.Running}}", trainer]).ok()? != "true" {
            return None;
        }
        let url = format!("http://{}:9091/metrics", self.ip(trainer));
        // Not listening yet: nothing received yet.
        Some(try_get(&url).map_or(0, |(_, text)| {
            metric_sum(&text, "stoker_client_samples_total").unwrap_or(0)
        }))
    }

    fn wait_trainer_samples(&self, trainer: &str, n: u64, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            match self.trainer_samples(trainer) {
                Some(got) if got >= n => return,
                Some(_) => {}
                None => panic!(
                    "the trainer exited before it got {n} samples: the faults came too late\n{}",
                    self.logs()
                ),
            }
            assert!(
                Instant::now() < deadline,
                "the trainer got fewer than {n} samples in {limit:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for the trainer to exit; its output and `--keys-out` file.
    fn finish_trainer(&self, trainer: &str, limit: Duration) -> StreamRun {
        let deadline = Instant::now() + limit;
        while docker(&["inspect", "--format", "{{.State.Running}}", trainer]).unwrap() == "true" {
            assert!(
                Instant::now() < deadline,
                "the trainer still runs after {limit:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        let code: i32 = docker(&["inspect", "--format", "{{.State.ExitCode}}", trainer])
            .unwrap()
            .parse()
            .unwrap();
        let logs = Command::new("docker").args(["logs", trainer]).output().unwrap();
        let keys = tempfile::tempdir().unwrap();
        let keys_path = keys.path().join("keys.tsv");
        let copied = docker(&["cp", &format!("{trainer}:/tmp/keys.tsv"), keys_path.to_str().unwrap()]);
        let keys_text = copied.map_or_else(|_| String::new(), |_| std::fs::read_to_string(&keys_path).unwrap());
        StreamRun::from_output(
            Output {
                status: std::process::ExitStatus::from_raw(code << 8),
                stdout: logs.stdout,
                stderr: logs.stderr,
            },
            &keys_text,
        )
    }

    /// A worker's samples sent, from its metrics endpoint.
    fn worker_samples_sent(&self, worker: &str) -> u64 {
        let text = http_get(&format!("http://{}:9090/metrics", self.ip(worker)));
        metric_sum(&text, WORKER_SAMPLES_SENT).unwrap_or(0)
    }

    fn prometheus(&self) -> String {
        let c = self.containers("prometheus").pop().expect("a prometheus container");
        format!("http://{}:9090", self.ip(&c))
    }

    /// `docker-compose down -v`, then checks that the project left no
    /// container, network or volume behind.
    fn down(mut self) {
        self.down = true;
        self.compose(&["down", "-v", "--remove-orphans", "-t", "5"]).unwrap();
        let label = format!("label=com.docker.compose.project={}", self.project);
        for kind in [["ps", "-a"].as_slice(), &["network", "ls"], &["volume", "ls"]] {
            let args: Vec<&str> = kind.iter().copied().chain(["-q", "--filter", label.as_str()]).collect();
            let left = docker(&args).unwrap();
            assert!(left.is_empty(), "`down -v` left {}: {left}", kind.join(" "));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.down {
            let _ = self.compose(&["down", "-v", "--remove-orphans", "-t", "1"]);
        }
    }
}

/// A fault injected with `docker ARGS`, tried up to 5 times: on a loaded
/// host the engine's own steps can fail for a moment (seen here: `docker
/// pause` refused with "unable to freeze" while the cgroup was busy), and
/// that failure is the harness's, not the cluster's.
fn inject(args: &[&str]) {
    let mut last = String::new();
    for _ in 0..5 {
        match docker(args) {
            Ok(_) => return,
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("could not inject the fault, 5 tries: {last}");
}

/// The sum of a metric's samples in Prometheus text (all label sets).
fn metric_sum(text: &str, name: &str) -> Option<u64> {
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            continue;
        }
        let value: f64 = rest.rsplit(' ').next()?.parse().ok()?;
        *found.get_or_insert(0) += value as u64;
    }
    found
}

/// A Prometheus instant query's vector result.
fn query(prometheus: &str, promql: &str) -> Vec<serde_json::Value> {
    let encoded: String = promql
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let answer = http_get_json(&format!("{prometheus}/api/v1/query?query={encoded}"));
    assert_eq!(answer["status"], "success", "{promql}: {answer}");
    answer["data"]["result"].as_array().cloned().unwrap_or_default()
}

fn skip(test: &str) -> bool {
    match unavailable() {
        Some(reason) => {
            crate::support::Need::Docker.skip(&format!("cluster::{test}"), reason);
            true
        }
        None => false,
    }
}

#[test]
fn the_cluster_delivers_two_epochs_once_and_prometheus_counts_them() {
    if skip("the_cluster_delivers_two_epochs_once_and_prometheus_counts_them") {
        return;
    }
    let started = Instant::now();
    let cluster = Cluster::up("up", 600, 2, &[("STOKER_BATCH_SIZE", "32")]);
    // A trainer with a 0.5 s step (about 20 s): long enough for Prometheus to find it
    // by DNS and scrape it.
    let trainer = cluster.start_trainer_with(&[("STOKER_STEP_SECONDS", "0.5")]);
    let paced = cluster.finish_trainer(&trainer, Duration::from_secs(300));
    assert_exactly_once(&paced, &cluster.expected, 0..2);
    // Then as fast as the cluster goes.
    let trainer = cluster.start_trainer_with(&[("STOKER_STEP_SECONDS", "0")]);
    let run = cluster.finish_trainer(&trainer, Duration::from_secs(300));
    assert_exactly_once(&run, &cluster.expected, 0..2);
    let delivered = (paced.keys.len() + run.keys.len()) as u64;
    // The trainer's report came through its log, with the rate.
    assert!(run.stderr().contains("streamed 1200 samples"), "{}", run.stderr());

    // The token is on: a client without it is refused before the worker
    // reads anything.
    let worker = cluster.containers("worker").pop().unwrap();
    let local = tempfile::tempdir().unwrap();
    synth_images(&local.path().join("images"), 8, 2, 16, 12);
    let shards = local.path().join("shards");
    pack(&local.path().join("images"), shards.to_str().unwrap(), "1M", &[]);
    let refused = stream_addrs(
        &[format!("{}:50051", cluster.ip(&worker))],
        shards.to_str().unwrap(),
        &["--batch-size", "4", "--image-size", "16"],
    );
    assert!(
        !refused.success() && refused.stderr().to_lowercase().contains("unauthenticated"),
        "a client without the token was not refused: {}",
        refused.stderr()
    );

    // Prometheus found both workers by Docker DNS, and its count of the
    // samples they sent matches what the trainer got.
    let prometheus = cluster.prometheus();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (up, total) = loop {
        let up = query(&prometheus, r#"up{job="stoker-worker"} == 1"#).len();
        let total = query(&prometheus, &format!("sum({WORKER_SAMPLES_SENT})"))
            .first()
            .and_then(|r| r["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()))
            .unwrap_or(0.0) as u64;
        if (up, total) == (2, delivered) || Instant::now() > deadline {
            break (up, total);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(up, 2, "worker targets up in Prometheus");
    assert_eq!(total, delivered, "sum({WORKER_SAMPLES_SENT}) in Prometheus");
    // The trainer was scraped while it ran.
    let trainer_samples = query(&prometheus, "max_over_time(stoker_client_samples_total[10m])");
    assert!(!trainer_samples.is_empty(), "Prometheus never scraped the trainer");

    // Every expression of the Grafana dashboard is valid PromQL here, and
    // those on CPU-worker metrics find data.
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo_root().join("deploy/grafana/stoker.json")).unwrap())
            .unwrap();
    let mut checked = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            let promql = expr
                .replace("$worker_job", "stoker-worker")
                .replace("$trainer_job", "stoker-trainer")
                .replace("$__rate_interval", "10m");
            // The trainer has exited: its series are stale now.
            let promql = if promql.contains("stoker_client_") {
                format!("last_over_time(({promql})[10m:5s])")
            } else {
                promql
            };
            let result = query(&prometheus, &promql);
            let may_be_empty = ["skipped", "retries", "resumes", "reassigned", "recommended", "path"]
                .iter()
                .any(|s| expr.contains(s));
            assert!(
                may_be_empty || !result.is_empty(),
                "dashboard panel {:?}: {promql} found no data",
                panel["title"]
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} dashboard expressions");
    println!(
        "cluster up: 2 workers, {} images/s through the cluster; with a 0.5 s step the trainer waited {:.1} s of {:.1} s; {:.0} s in all",
        run.json.as_ref().unwrap()["images_per_sec"].as_f64().unwrap().round(),
        paced.json.as_ref().unwrap()["wait_seconds"].as_f64().unwrap(),
        paced.json.as_ref().unwrap()["seconds"].as_f64().unwrap(),
        started.elapsed().as_secs_f64()
    );
    cluster.down();
}

#[test]
fn workers_scaled_up_mid_epoch_get_work() {
    if skip("workers_scaled_up_mid_epoch_get_work") {
        return;
    }
    let cluster = Cluster::up(
        "scale",
        2000,
        1,
        // 1000x750 JPEGs: one worker takes about 8 s an epoch here, so
        // the trainer waits on the workers and new ones find work.
        &[
            ("STOKER_EPOCHS", "3"),
            ("STOKER_STEP_SECONDS", "0"),
            ("STOKER_DEMO_WIDTH", "1000"),
            ("STOKER_DEMO_HEIGHT", "750"),
            ("STOKER_DEMO_SHARD_SIZE", "2M"),
        ],
    );
    let trainer = cluster.start_trainer();
    cluster.wait_trainer_samples(&trainer, 200, Duration::from_secs(120));
    cluster
        .compose(&[
            "up",
            "-d",
            "--no-deps",
            "--no-recreate",
            "--scale",
            "worker=4",
            "worker",
        ])
        .unwrap();
    let at_scale = cluster.trainer_samples(&trainer);
    let run = cluster.finish_trainer(&trainer, Duration::from_secs(300));
    assert!(
        at_scale.is_some_and(|n| n < 2000),
        "the first epoch was over ({at_scale:?} samples) when the new workers started"
    );
    assert_exactly_once(&run, &cluster.expected, 0..3);
    let sent: Vec<u64> = cluster
        .containers("worker")
        .iter()
        .map(|w| cluster.worker_samples_sent(w))
        .collect();
    assert_eq!(sent.len(), 4);
    assert!(sent.iter().all(|&n| n > 0), "samples sent per worker: {sent:?}");
    assert_eq!(sent.iter().sum::<u64>(), run.keys.len() as u64, "{sent:?}");
    println!(
        "scaled 1 -> 4 workers mid-epoch at {} samples; samples sent per worker: {sent:?}",
        at_scale.unwrap_or_default()
    );
    cluster.down();
}

#[test]
fn the_cluster_survives_a_kill_a_pause_a_network_cut_and_an_s3_restart() {
    if skip("the_cluster_survives_a_kill_a_pause_a_network_cut_and_an_s3_restart") {
        return;
    }
    const IMAGES: u64 = 2000;
    let cluster = Cluster::up(
        "faults",
        IMAGES as usize,
        4,
        &[
            ("STOKER_EPOCHS", "4"),
            // Workers are the bottleneck (1000x750 JPEGs, about 10 s an
            // epoch here), so each always has items in flight to lose.
            ("STOKER_STEP_SECONDS", "0"),
            ("STOKER_DEMO_WIDTH", "1000"),
            ("STOKER_DEMO_HEIGHT", "750"),
            ("STOKER_DEMO_SHARD_SIZE", "2M"),
            ("STOKER_PROGRESS_TIMEOUT", "4"),
            ("STOKER_WORKER_PATIENCE", "60"),
        ],
    );
    let workers = cluster.containers("worker");
    let network = format!("{}_default", cluster.project);
    let trainer = cluster.start_trainer();
    let mid = |epoch: u64| epoch * IMAGES + IMAGES / 4;
    let limit = Duration::from_secs(180);

    // Epoch 0: a worker killed.
    cluster.wait_trainer_samples(&trainer, mid(0), limit);
    inject(&["kill", &workers[0]]);

    // Epoch 1: another paused past the trainer's progress timeout.
    cluster.wait_trainer_samples(&trainer, mid(1), limit);
    inject(&["pause", &workers[1]]);
    std::thread::sleep(Duration::from_secs(7));
    inject(&["unpause", &workers[1]]);

    // Epoch 2: a third cut off the network, then back (with its service
    // alias, as compose attaches it).
    cluster.wait_trainer_samples(&trainer, mid(2), limit);
    inject(&["network", "disconnect", &network, &workers[2]]);
    std::thread::sleep(Duration::from_secs(6));
    inject(&["network", "connect", "--alias", "worker", &network, &workers[2]]);

    // Epoch 3: the S3 store restarted.
    cluster.wait_trainer_samples(&trainer, mid(3), limit);
    let s3 = cluster.containers("s3").pop().unwrap();
    inject(&["restart", "-t", "2", &s3]);

    let run = cluster.finish_trainer(&trainer, Duration::from_secs(300));
    assert_exactly_once(&run, &cluster.expected, 0..4);
    let report = run.json.as_ref().unwrap();
    println!(
        "faults survived (kill, pause 7 s, network cut 6 s, S3 restart): {} samples over 4 epochs, {} items reassigned, {} images/s",
        report["samples"],
        report["retries"],
        report["images_per_sec"].as_f64().unwrap().round()
    );
    assert!(
        report["retries"].as_u64().unwrap() > 0,
        "no item was reassigned: the faults missed the trainer's work\n{}",
        run.stderr()
    );
    cluster.down();
}
