//! The deployment assets checked offline with their own ecosystems' tools:
//! the Prometheus configuration and alert rules with promtool (Debian's
//! prometheus package, with unit tests of when each alert fires), the
//! Kubernetes manifests rendered by kubectl's kustomize (Debian's
//! kubernetes-client) and validated against the Kubernetes schemas by
//! kubernetes-validate (PyPI). scripts/test.sh installs all three.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{python, repo_root, run_ok};

/// A Debian package's program, extracted by scripts/deb-tool.sh.
fn deb_tool(package: &str, program: &str) -> PathBuf {
    let p = repo_root()
        .join("target/tools/deb")
        .join(package)
        .join("usr/bin")
        .join(program);
    assert!(
        p.exists(),
        "{program} not found at {}: scripts/test.sh extracts Debian's {package} package there (scripts/deb-tool.sh)",
        p.display()
    );
    p
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8(run_ok(cmd).stdout).unwrap()
}

#[test]
fn the_prometheus_config_and_alert_rules_pass_promtool_and_their_unit_tests() {
    let promtool = deb_tool("prometheus", "promtool");
    let dir = repo_root().join("deploy/prometheus");
    let checked = stdout(
        Command::new(&promtool)
            .arg("check")
            .arg("config")
            .arg(dir.join("prometheus.yml")),
    );
    assert!(checked.contains("SUCCESS"), "{checked}");
    let rules = stdout(
        Command::new(&promtool)
            .arg("check")
            .arg("rules")
            .arg(dir.join("alerts.yml")),
    );
    assert!(rules.contains("SUCCESS: 6 rules found"), "{rules}");
    let tests = stdout(
        Command::new(&promtool)
            .arg("test")
            .arg("rules")
            .arg(dir.join("alerts_test.yml")),
    );
    assert!(tests.contains("SUCCESS"), "{tests}");

    // The unit tests can fail: an alert text changed is caught.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(dir.join("alerts.yml"), tmp.path().join("alerts.yml")).unwrap();
    let cases = std::fs::read_to_string(dir.join("alerts_test.yml")).unwrap();
    assert!(cases.contains("1.961%"));
    std::fs::write(tmp.path().join("alerts_test.yml"), cases.replace("1.961%", "2.5%")).unwrap();
    let out = Command::new(&promtool)
        .arg("test")
        .arg("rules")
        .arg(tmp.path().join("alerts_test.yml"))
        .output()
        .unwrap();
    assert!(!out.status.success(), "promtool passed a wrong expectation");
}

fn kustomize(dir: &Path) -> String {
    let kubectl = deb_tool("kubernetes-client", "kubectl");
    stdout(Command::new(kubectl).arg("kustomize").arg(dir))
}

/// kubernetes-validate, strict (unknown fields are errors), against
/// Kubernetes 1.30's schemas; the output and whether it passed.
fn validate(files: &[&Path]) -> (String, bool) {
    let out = python()
        .args(["-m", "kubernetes_validate", "--strict", "-k", "1.30.0"])
        .args(files)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (text, out.status.success())
}

#[test]
fn the_kubernetes_manifests_render_and_validate_against_the_schemas() {
    let k8s = repo_root().join("deploy/k8s");
    let tmp = tempfile::tempdir().unwrap();
    let base = kustomize(&k8s.join("base"));
    let gpu = kustomize(&k8s.join("overlays/gpu"));
    for kind in [
        "kind: Deployment",
        "kind: Service",
        "kind: PodDisruptionBudget",
        "kind: HorizontalPodAutoscaler",
        "kind: NetworkPolicy",
        "kind: Secret",
    ] {
        assert!(base.contains(kind), "the base renders no {kind}");
    }
    assert!(base.contains("clusterIP: None"), "the Service is not headless");
    assert!(
        base.contains("grpc:\n            port: 50051"),
        "no grpc.health.v1 probe"
    );
    assert!(gpu.contains("image: stoker-worker-gpu:latest"), "{gpu}");
    assert!(
        gpu.contains("nvidia.com/gpu: 1") && gpu.contains("--device=cuda"),
        "{gpu}"
    );

    // Workers serve only the example Job's bucket (--allow-dataset).
    let job_text = std::fs::read_to_string(k8s.join("examples/trainer-job.yaml")).unwrap();
    assert!(job_text.contains("--dataset=s3://my-bucket/"), "{job_text}");
    for rendered in [&base, &gpu] {
        let allowed = rendered
            .lines()
            .skip_while(|l| !l.contains("name: STOKER_ALLOW_DATASET"))
            .nth(1)
            .map(str::trim);
        assert_eq!(allowed, Some("value: s3://my-bucket/"), "{rendered}");
    }

    let base_file = tmp.path().join("base.yaml");
    let gpu_file = tmp.path().join("gpu.yaml");
    std::fs::write(&base_file, &base).unwrap();
    std::fs::write(&gpu_file, &gpu).unwrap();
    let job = k8s.join("examples/trainer-job.yaml");
    let (text, ok) = validate(&[&base_file, &gpu_file, &job]);
    assert!(ok, "{text}");
    // 7 resources in each rendering and the Job.
    assert_eq!(text.matches(" passed for resource ").count(), 15, "{text}");
    assert!(
        std::fs::read_to_string(&job)
            .unwrap()
            .contains("dns://stoker-worker:50051")
    );

    // The validation can fail: a misspelt field is caught.
    let broken = tmp.path().join("broken.yaml");
    std::fs::write(&broken, base.replace("readinessProbe:", "readinesProbe:")).unwrap();
    let (text, ok) = validate(&[&broken]);
    assert!(!ok, "a misspelt field passed validation:\n{text}");
}

#[test]
fn the_grafana_dashboard_is_well_formed() {
    let text = std::fs::read_to_string(repo_root().join("deploy/grafana/stoker.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    let mut ids: Vec<u64> = panels.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), panels.len(), "panel ids repeat");
    let exprs: Vec<&str> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .map(|t| t["expr"].as_str().unwrap())
        .collect();
    // What the issue asks the dashboard to show.
    for metric in [
        "stoker_worker_samples_sent_total",
        "stoker_worker_stage_seconds_bucket",
        "stoker_worker_skipped_total",
        "stoker_client_wait_seconds_total",
        "stoker_client_recommended_workers",
    ] {
        assert!(exprs.iter().any(|e| e.contains(metric)), "no panel on {metric}");
    }
    // Every metric it names is one docs/operations.md documents.
    let page = std::fs::read_to_string(repo_root().join("docs/operations.md")).unwrap();
    for e in &exprs {
        for name in e
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("stoker_"))
        {
            let documented = name.trim_end_matches("_bucket");
            assert!(
                page.contains(documented),
                "{name} in the dashboard is not in docs/operations.md"
            );
        }
    }
}
