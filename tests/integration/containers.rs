//! The worker images (deploy/docker/worker.Dockerfile), built by
//! deploy/docker/build.sh from the local base image that `scripts/test.sh`
//! makes (`scripts/docker-base.sh`: no registry can be reached here) and run
//! for real: the CPU image becomes healthy by grpc.health.v1, runs as a
//! non-root user, and a stream from the host through the container delivers
//! every sample once; the GPU image, on a host without a GPU, falls back to
//! the CPU, says so, and serves. Without Docker or the base image the tests
//! say why and skip. The base image's Debian mirror comes from the
//! machine's apt sources, both formats (checked without Docker).

use std::time::{Duration, Instant};

use crate::support::{
    DOCKER_BASE, DOCKER_TAG, assert_exactly_once, build_images, docker, image_folder_keys, pack, stream_addrs,
    synth_images,
};

/// Removes the container when the test ends, passed or not.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.0]);
    }
}

impl Container {
    /// `docker run -d` of `image` with `args` before it; health checked
    /// every second.
    fn run(image: &str, args: &[&str]) -> Self {
        let name = format!("stoker-test-{}-{}", image.replace([':', '/'], "-"), std::process::id());
        let mut all = vec![
            "run",
            "-d",
            "--name",
            &name,
            "--health-interval",
            "1s",
            "--health-start-period",
            "1s",
        ];
        all.extend_from_slice(args);
        all.push(image);
        docker(&all).unwrap();
        Self(name)
    }

    /// Waits for Docker to call the container healthy (its HEALTHCHECK,
    /// `stoker health`, got SERVING).
    fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = docker(&["inspect", "--format", "{{.State.Health.Status}}", &self.0]).unwrap();
            if status == "healthy" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "container {} is still {status} after 60 s; logs:\n{}",
                self.0,
                docker(&["logs", &self.0]).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A container of `image` serving `images` synthetic JPEGs packed into
/// shards mounted at /data, healthy and checked to run as user 10001; the
/// keys it should deliver, and the folder to keep.
fn serve_shards(image: &str, images: usize) -> (Container, Vec<(String, i64)>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&folder, images, 3, 96, 72);
    pack(&folder, shards.to_str().unwrap(), "60K", &[]);
    let mount = format!("{}:/data:ro", shards.display());
    let container = Container::run(image, &["-v", &mount]);
    container.wait_healthy();
    assert_eq!(docker(&["exec", &container.0, "id", "-u"]).unwrap(), "10001");
    (container, image_folder_keys(&folder), dir)
}

fn skip(test: &str) -> bool {
    match docker(&["image", "inspect", DOCKER_BASE]) {
        Ok(_) => false,
        Err(reason) => {
            crate::support::Need::Docker.skip(
                &format!("containers::{test}"),
                format!("no base image {DOCKER_BASE} ({reason}); scripts/test.sh makes it where Docker runs as root"),
            );
            true
        }
    }
}

#[test]
fn the_worker_image_serves_healthy_as_non_root_and_delivers_every_sample_once() {
    if skip("the_worker_image_serves_healthy_as_non_root_and_delivers_every_sample_once") {
        return;
    }
    build_images();
    let (container, expected, _dir) = serve_shards(&format!("stoker-worker:{DOCKER_TAG}"), 120);

    let ip = docker(&["inspect", "--format", "{{.NetworkSettings.IPAddress}}", &container.0]).unwrap();
    let run = stream_addrs(
        &[format!("{ip}:50051")],
        "/data",
        &["--batch-size", "16", "--image-size", "32", "--epochs", "2"],
    );
    assert!(run.success(), "{}", run.stderr());
    assert_exactly_once(&run, &expected, 0..2);
}

#[test]
fn the_gpu_image_without_a_gpu_falls_back_to_the_cpu_says_so_and_serves() {
    if skip("the_gpu_image_without_a_gpu_falls_back_to_the_cpu_says_so_and_serves") {
        return;
    }
    build_images();
    let image = format!("stoker-worker-gpu:{DOCKER_TAG}");
    let env = docker(&["image", "inspect", "--format", "{{json .Config.Env}}", &image]).unwrap();
    assert!(
        env.contains("NVIDIA_DRIVER_CAPABILITIES=compute,utility") && env.contains("NVIDIA_VISIBLE_DEVICES=all"),
        "the GPU image does not ask the NVIDIA toolkit for the GPU: {env}"
    );
    let (container, expected, _dir) = serve_shards(&image, 40);
    let logs = std::process::Command::new("docker")
        .args(["logs", &container.0])
        .output()
        .unwrap();
    let logs = String::from_utf8_lossy(&logs.stderr);
    assert!(
        logs.contains("no usable gpu; serving on cpu"),
        "the worker did not say it fell back:\n{logs}"
    );
    let ip = docker(&["inspect", "--format", "{{.NetworkSettings.IPAddress}}", &container.0]).unwrap();
    let run = stream_addrs(
        &[format!("{ip}:50051")],
        "/data",
        &["--batch-size", "8", "--image-size", "32"],
    );
    assert_exactly_once(&run, &expected, 0..1);
}

/// `scripts/docker-base.sh --print-mirror` with `etc` as /etc/apt: the
/// mirror it would debootstrap from, or its error.
fn base_mirror(etc: &std::path::Path) -> Result<String, String> {
    let out = std::process::Command::new(crate::support::repo_root().join("scripts/docker-base.sh"))
        .arg("--print-mirror")
        .env("APT_ETC", etc)
        .env_remove("STOKER_DEBIAN_MIRROR")
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_owned();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(text(&out.stderr))
    }
}

#[test]
fn the_base_image_takes_its_mirror_from_the_machines_apt_sources() {
    let etc = tempfile::tempdir().unwrap();
    let list_d = etc.path().join("sources.list.d");
    std::fs::create_dir(&list_d).unwrap();
    let err = base_mirror(etc.path()).unwrap_err();
    assert!(
        err.contains("no apt source for bookworm") && err.contains("STOKER_DEBIAN_MIRROR"),
        "{err}"
    );

    // deb822: disabled entries, deb-src only and other suites are passed
    // over; a folded URIs field keeps its first URI.
    std::fs::write(
        list_d.join("debian.sources"),
        "Types: deb\nURIs: http://192.0.2.1/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n\n\
         Types: deb-src\nURIs: http://192.0.2.2/debian\nSuites: bookworm\nComponents: main\n\n\
         # security\nTypes: deb\nURIs: http://192.0.2.3/debian-security\nSuites: bookworm-security\n\n\
         Types: deb deb-src\nURIs: http://192.0.2.4/debian\n http://192.0.2.5/debian\n\
         Suites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
    )
    .unwrap();
    assert_eq!(base_mirror(etc.path()).unwrap(), "http://192.0.2.4/debian");

    // One-line sources.list comes first; comments, deb-src and options are
    // passed over.
    std::fs::write(
        etc.path().join("sources.list"),
        "# deb http://192.0.2.6/debian bookworm main\n\
         deb-src http://192.0.2.7/debian bookworm main\n\
         deb http://192.0.2.8/debian bookworm-updates main\n\
         deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://192.0.2.9/debian bookworm main contrib\n",
    )
    .unwrap();
    assert_eq!(base_mirror(etc.path()).unwrap(), "http://192.0.2.9/debian");

    // And a `.list` file under sources.list.d.
    std::fs::remove_file(etc.path().join("sources.list")).unwrap();
    std::fs::remove_file(list_d.join("debian.sources")).unwrap();
    std::fs::write(
        list_d.join("mirror.list"),
        "deb file:///srv/mirror/debian bookworm main\n",
    )
    .unwrap();
    assert_eq!(base_mirror(etc.path()).unwrap(), "file:///srv/mirror/debian");

    // No mirror is named in the script itself.
    let script = std::fs::read_to_string(crate::support::repo_root().join("scripts/docker-base.sh")).unwrap();
    assert!(
        !script.contains("http://") && !script.contains("https://"),
        "scripts/docker-base.sh names a mirror"
    );
}
