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

/// Every `.rs` file under `dir`, into `out`.
fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules of the crate at `src` (a file `X.rs` or a folder
/// `X/`) and, for each, the other top-level modules its non-test code
/// names as `crate::Y` (comments and `#[cfg(test)] mod tests` left out:
/// only what ships).
fn module_graph(src: &std::path::Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files: BTreeMap<String, Vec<std::path::PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        if path.is_dir() {
            rust_files(&path, files.entry(name).or_default());
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main" {
            files.entry(name).or_default().push(path);
        }
    }
    let mut graph = BTreeMap::new();
    for (module, paths) in &files {
        let mut uses = BTreeSet::new();
        for path in paths {
            if path.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(path).unwrap();
            let shipped = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
            for line in shipped.lines() {
                let code = line.split("//").next().unwrap_or_default();
                for (i, _) in code.match_indices("crate::") {
                    let name: String = code[i + 7..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if name != *module && files.contains_key(&name) {
                        uses.insert(name);
                    }
                }
            }
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

/// ARCHITECTURE.md: "Modules depend on each other one way (no cycles)":
/// within core, the worker library and the client, no module reaches
/// itself through the modules it uses.
#[test]
fn modules_depend_on_each_other_one_way() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for krate in ["core/src", "server/src", "client/src"] {
        let graph = module_graph(&root.join(krate));
        assert!(graph.len() > 5, "{krate}: {} modules found", graph.len());
        for module in graph.keys() {
            let mut seen = BTreeSet::new();
            let mut stack: Vec<&String> = graph[module].iter().collect();
            while let Some(next) = stack.pop() {
                assert!(next != module, "{krate}: {module} reaches itself through {seen:?}");
                if seen.insert(next.clone()) {
                    stack.extend(graph[next].iter());
                }
            }
        }
    }
}

/// ARCHITECTURE.md: "Protobuf stays at the edge": outside the proto crate,
/// only the gRPC edges' files name `pb` types (shipped code and tests
/// alike; the CLI speaks in the libraries' types).
#[test]
fn protobuf_types_stay_at_the_grpc_edges() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let edges = [
        "server/src/service.rs",
        "server/src/chained.rs",
        "client/src/wire.rs",
        "client/src/wire/chunks.rs",
    ];
    let mut files = Vec::new();
    for krate in ["core/src", "server/src", "client/src", "cli/src"] {
        rust_files(&root.join(krate), &mut files);
    }
    let mut found_at_edges = 0;
    let mut outside = Vec::new();
    for path in files {
        let relative = path.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(&path).unwrap();
        let names_pb = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or_default())
            .any(|code| code.contains("pb::") || code.contains("stoker_proto::pb"));
        if edges.contains(&relative.as_str()) {
            found_at_edges += usize::from(names_pb);
        } else if names_pb {
            outside.push(relative);
        }
    }
    assert!(
        outside.is_empty(),
        "protobuf types named outside the gRPC edges: {outside:?}"
    );
    assert_eq!(
        found_at_edges,
        edges.len(),
        "an edge file no longer names pb types: update the list"
    );
}
