//! The worker image (deploy/docker/worker.Dockerfile), built from the local
//! base image that `scripts/test.sh` makes (`scripts/docker-base.sh`: no
//! registry can be reached here) and run for real: it becomes healthy by
//! grpc.health.v1, runs as a non-root user, and a stream from the host
//! through the container delivers every sample once. Without Docker or the
//! base image the test says why and skips.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{assert_exactly_once, image_folder_keys, pack, repo_root, stoker_bin, stream_addrs, synth_images};

const BASE: &str = "stoker-base:bookworm";
const IMAGE: &str = "stoker-worker:test";

fn docker(args: &[&str]) -> Result<String, String> {
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

/// Removes the container when the test ends, passed or not.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.0]);
    }
}

#[test]
fn the_worker_image_serves_healthy_as_non_root_and_delivers_every_sample_once() {
    if let Err(reason) = docker(&["image", "inspect", BASE]) {
        println!(
            "skipped: the_worker_image_*: no base image {BASE} ({reason}); scripts/test.sh makes it where Docker runs as root"
        );
        return;
    }
    // The image, from this build's binary, stripped, as deploy/docker/build.sh makes it.
    let context = tempfile::tempdir().unwrap();
    let bin = context.path().join("stoker");
    let stripped = Command::new("strip")
        .args(["-o", bin.to_str().unwrap(), stoker_bin()])
        .status()
        .is_ok_and(|s| s.success());
    if !stripped {
        std::fs::copy(stoker_bin(), &bin).unwrap();
    }
    let dockerfile = repo_root().join("deploy/docker/worker.Dockerfile");
    docker(&[
        "build",
        "-q",
        "-f",
        dockerfile.to_str().unwrap(),
        "--build-arg",
        &format!("BASE_IMAGE={BASE}"),
        "-t",
        IMAGE,
        context.path().to_str().unwrap(),
    ])
    .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 120, 3, 96, 72);
    pack(&images, shards.to_str().unwrap(), "60K", &[]);
    let expected = image_folder_keys(&images);
    let name = format!("stoker-test-{}", std::process::id());
    let mount = format!("{}:/data:ro", shards.display());
    docker(&[
        "run",
        "-d",
        "--name",
        &name,
        "--health-interval",
        "1s",
        "--health-start-period",
        "1s",
        "-v",
        &mount,
        IMAGE,
    ])
    .unwrap();
    let container = Container(name);

    // Healthy: the HEALTHCHECK's `stoker health` got SERVING.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = docker(&["inspect", "--format", "{{.State.Health.Status}}", &container.0]).unwrap();
        if status == "healthy" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the worker container is still {status} after 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(docker(&["exec", &container.0, "id", "-u"]).unwrap(), "10001");

    let ip = docker(&["inspect", "--format", "{{.NetworkSettings.IPAddress}}", &container.0]).unwrap();
    let run = stream_addrs(
        &[format!("{ip}:50051")],
        "/data",
        &["--batch-size", "16", "--image-size", "32", "--epochs", "2"],
    );
    assert!(run.success(), "{}", run.stderr());
    assert_exactly_once(&run, &expected, 0..2);
}
