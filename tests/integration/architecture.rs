//! The dependency direction between the workspace's crates (ARCHITECTURE.md,
//! "Architecture invariants"), checked on the resolved graph that
//! `cargo metadata` reports, so that a new dependency that points the wrong
//! way fails here rather than in review.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// For each workspace crate, the crates it may never reach through its
/// normal (non-dev, non-build) dependencies, directly or transitively.
const FORBIDDEN: &[(&str, &[&str])] = &[
    // The worker library: no client, no command-line or logging set-up.
    (
        "stoker-server",
        &["stoker-client", "stoker", "clap", "tracing-subscriber"],
    ),
    // The client (and through it the Python package): no worker code, and
    // none of the worker's shard readers (the parquet crate and arrow).
    (
        "stoker-client",
        &[
            "stoker-server",
            "stoker-formats",
            "stoker-image",
            "parquet",
            "arrow-array",
            "stoker",
            "clap",
            "tracing-subscriber",
        ],
    ),
    // Shared pieces depend on nothing of Stoker's but core.
    (
        "stoker-proto",
        &[
            "stoker-server",
            "stoker-client",
            "stoker-kernels",
            "stoker-formats",
            "stoker-image",
            "stoker",
        ],
    ),
    (
        "stoker-kernels",
        &[
            "stoker-core",
            "stoker-proto",
            "stoker-server",
            "stoker-client",
            "stoker-image",
            "stoker",
        ],
    ),
    // The CPU image path: core and formats only, nothing of the worker's
    // I/O (the fuzz target builds it on its own).
    (
        "stoker-image",
        &[
            "stoker-proto",
            "stoker-server",
            "stoker-client",
            "stoker-kernels",
            "stoker",
            "tokio-stream",
            "aws-sdk-s3",
            "parquet",
            "tonic",
            "rayon",
        ],
    ),
    (
        "stoker-formats",
        &[
            "stoker-core",
            "stoker-proto",
            "stoker-server",
            "stoker-client",
            "stoker-image",
            "stoker",
        ],
    ),
    // The metrics endpoint knows no Stoker crate: each side brings its own
    // registry.
    (
        "stoker-metrics",
        &[
            "stoker-core",
            "stoker-proto",
            "stoker-server",
            "stoker-client",
            "stoker-kernels",
            "stoker-formats",
            "stoker-image",
            "stoker",
        ],
    ),
    (
        "stoker-core",
        &[
            "stoker-proto",
            "stoker-server",
            "stoker-client",
            "stoker-kernels",
            "stoker-formats",
            "stoker-image",
            "stoker",
        ],
    ),
];

/// Package name -> the package names of its normal dependencies.
fn normal_dependency_graph(metadata: &Value) -> BTreeMap<String, BTreeSet<String>> {
    let names: BTreeMap<&str, &str> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let mut graph = BTreeMap::new();
    for node in metadata["resolve"]["nodes"].as_array().unwrap() {
        let deps = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["dep_kinds"].as_array().unwrap().iter().any(|k| k["kind"].is_null()))
            .map(|d| names[d["pkg"].as_str().unwrap()].to_owned())
            .collect();
        graph.insert(names[node["id"].as_str().unwrap()].to_owned(), deps);
    }
    graph
}

fn reachable(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_owned()];
    while let Some(p) = todo.pop() {
        for d in graph.get(&p).into_iter().flatten() {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

/// The host's target triple, from `rustc -vV`.
fn host_triple(cargo: &str) -> Option<String> {
    let rustc = std::path::Path::new(cargo).with_file_name("rustc");
    let rustc = if rustc.exists() { rustc } else { "rustc".into() };
    let out = Command::new(rustc).arg("-vV").output().ok()?;
    String::from_utf8(out.stdout)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
}

#[test]
fn workspace_dependencies_point_one_way() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    // The graph for this host only: offline, cargo has the sources of the
    // crates this host builds, not those of other platforms (Windows
    // console crates, say).
    let host = host_triple(&cargo);
    let mut args = vec![
        "metadata",
        "--format-version",
        "1",
        "--offline",
        "--manifest-path",
        manifest,
    ];
    if let Some(host) = &host {
        args.extend(["--filter-platform", host]);
    }
    let out = match Command::new(&cargo).args(args).output() {
        Ok(out) => out,
        Err(e) => {
            println!("skipped: cannot run {cargo} metadata ({e}); the dependency check needs cargo");
            return;
        }
    };
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).unwrap();
    let graph = normal_dependency_graph(&metadata);
    let mut wrong = Vec::new();
    for (krate, never) in FORBIDDEN {
        assert!(
            graph.contains_key(*krate),
            "{krate} is not in the workspace any more: update FORBIDDEN"
        );
        let reach = reachable(&graph, krate);
        wrong.extend(
            never
                .iter()
                .filter(|n| reach.contains(**n))
                .map(|n| format!("{krate} -> {n}")),
        );
    }
    assert!(wrong.is_empty(), "dependencies that point the wrong way: {wrong:?}");
    // Libraries return typed errors (thiserror); anyhow is the binary's.
    for krate in FORBIDDEN.iter().map(|(k, _)| *k) {
        assert!(
            !graph[krate].contains("anyhow"),
            "{krate} depends on anyhow: libraries use thiserror enums"
        );
    }
    // Only the command line joins the two halves.
    let cli = reachable(&graph, "stoker");
    assert!(
        cli.contains("stoker-server") && cli.contains("stoker-client"),
        "{cli:?}"
    );
}
