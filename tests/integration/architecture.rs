//! The dependency direction between the workspace's crates (ARCHITECTURE.md,
//! Invariants: "Dependencies point one way"), checked on the resolved graph that
//! `cargo metadata` reports, so that a new dependency that points the wrong
//! way fails here rather than in review.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

use crate::module_graph;

/// For each workspace crate, the crates it may never reach through its
/// normal (non-dev, non-build) dependencies, directly or transitively.
const FORBIDDEN: &[(&str, &[&str])] = &[
    // The worker library: no client, no command-line or logging set-up,
    // none of the tools that write datasets (its tests take stoker-synth
    // as a dev-dependency, never stoker-pack: checked below).
    (
        "stoker-worker",
        &[
            "stoker-client",
            "stoker",
            "stoker-pack",
            "stoker-synth",
            "clap",
            "tracing-subscriber",
        ],
    ),
    // `stoker pack` sits above the worker (it reads through the worker's
    // readers) and below the command line: no client, no CLI.
    (
        "stoker-pack",
        &["stoker-client", "stoker", "stoker-synth", "clap", "tracing-subscriber"],
    ),
    // Test images: above the CPU image path only, never the worker or its
    // I/O.
    (
        "stoker-synth",
        &[
            "stoker-worker",
            "stoker-pack",
            "stoker-client",
            "stoker-proto",
            "stoker-storage",
            "stoker-cuda",
            "stoker",
            "parquet",
            "tonic",
            "aws-sdk-s3",
        ],
    ),
    // The client (and through it the Python package): no worker code, and
    // none of the worker's shard readers (the parquet crate and arrow).
    (
        "stoker-client",
        &[
            "stoker-worker",
            "stoker-storage",
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
            "stoker-worker",
            "stoker-client",
            "stoker-cuda",
            "stoker-formats",
            "stoker-image",
            "stoker",
        ],
    ),
    (
        "stoker-cuda",
        &[
            "stoker-core",
            "stoker-proto",
            "stoker-worker",
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
            "stoker-worker",
            "stoker-client",
            "stoker-cuda",
            "stoker",
            "tokio-stream",
            "aws-sdk-s3",
            "parquet",
            "tonic",
            "rayon",
        ],
    ),
    // Storage reads bytes: no decoding, no gRPC, no GPU, nothing of the
    // worker above it (the catalog, Parquet, the pipeline).
    (
        "stoker-storage",
        &[
            "stoker-proto",
            "stoker-worker",
            "stoker-client",
            "stoker-cuda",
            "stoker-image",
            "stoker-metrics",
            "stoker",
            "tonic",
            "parquet",
            "cudarc",
            "rayon",
        ],
    ),
    // The region decoder's FFI: libjpeg-turbo and the image type, nothing
    // of the worker.
    (
        "stoker-libjpeg",
        &[
            "stoker-proto",
            "stoker-worker",
            "stoker-client",
            "stoker-cuda",
            "stoker-storage",
            "stoker",
        ],
    ),
    (
        "stoker-formats",
        &[
            "stoker-core",
            "stoker-proto",
            "stoker-worker",
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
            "stoker-worker",
            "stoker-client",
            "stoker-cuda",
            "stoker-formats",
            "stoker-image",
            "stoker",
        ],
    ),
    (
        "stoker-core",
        &[
            "stoker-proto",
            "stoker-worker",
            "stoker-client",
            "stoker-cuda",
            "stoker-formats",
            "stoker-image",
            "stoker",
        ],
    ),
];

/// Package name -> the package names of its normal dependencies.
fn normal_dependency_graph(metadata: &Value) -> BTreeMap<String, BTreeSet<String>> {
    dependency_graph(metadata, |kind| kind.is_null())
}

/// Package name -> the package names of its dependencies of the kinds
/// `keep` takes (`null` normal, `"dev"`, `"build"`).
fn dependency_graph(metadata: &Value, keep: impl Fn(&Value) -> bool) -> BTreeMap<String, BTreeSet<String>> {
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
            .filter(|d| d["dep_kinds"].as_array().unwrap().iter().any(|k| keep(&k["kind"])))
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
            crate::support::Need::Cargo.skip(
                "workspace_dependencies_point_one_way",
                format!("cannot run {cargo} metadata ({e})"),
            );
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
        cli.contains("stoker-worker") && cli.contains("stoker-client"),
        "{cli:?}"
    );
    // The worker's tests write their shards by hand: a dev-dependency on
    // stoker-pack, which depends on the worker, would build a second copy
    // of the worker into them, whose types are not the worker's own.
    let any_kind = dependency_graph(&metadata, |_| true);
    assert!(
        !any_kind["stoker-worker"].contains("stoker-pack"),
        "stoker-worker depends on stoker-pack: write test shards with stoker-formats or the parquet crate"
    );
    assert!(
        any_kind["stoker-pack"].contains("stoker-worker"),
        "{:?}",
        any_kind["stoker-pack"]
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

/// Every workspace crate's sources, for the module-graph check.
const CRATE_SOURCES: &[&str] = &[
    "core/src",
    "proto/src",
    "metrics/src",
    "cuda/src",
    "libjpeg/src",
    "shm/src",
    "worker/formats/src",
    "worker/image/src",
    "worker/storage/src",
    "worker/src",
    "synth/src",
    "pack/src",
    "client/src",
    "cli/src",
];

/// ARCHITECTURE.md: "Modules depend on each other one way (no cycles)":
/// in every workspace crate, no file-level module reaches itself through
/// the files it names (`crate::`, `super::`, `self::` and child paths,
/// grouped imports included; see `module_graph`).
#[test]
fn modules_depend_on_each_other_one_way() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut wrong = Vec::new();
    for krate in CRATE_SOURCES {
        let graph = module_graph::Crate::read(&root.join(krate)).graph();
        assert!(!graph.is_empty(), "{krate}: no modules found");
        for (_, text) in module_graph::circles(&graph) {
            wrong.push(format!("{krate}: {text}"));
        }
    }
    assert!(wrong.is_empty(), "modules that reach themselves:\n{}", wrong.join("\n"));
}

/// The Python package (client/python/python/stoker) as well: no module
/// reaches itself through its imports, function-local ones included.
#[test]
fn python_modules_import_each_other_one_way() {
    let dir = crate::support::repo_root().join("client/python/python/stoker");
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let twin = path.with_extension("py");
        let keep = name.ends_with(".py") || (name.ends_with(".pyi") && !twin.exists());
        if keep {
            sources.push((format!("stoker/{name}"), std::fs::read_to_string(&path).unwrap()));
        }
    }
    let graph = module_graph::python_graph("stoker", &sources);
    assert!(graph.len() > 5, "no Python modules found in {}", dir.display());
    assert!(
        graph["stoker/transforms.py"].contains_key("stoker/_batch.py"),
        "{graph:?}"
    );
    let circles: Vec<String> = module_graph::circles(&graph)
        .into_iter()
        .map(|(_, text)| text)
        .collect();
    assert!(
        circles.is_empty(),
        "Python modules that reach themselves:\n{}",
        circles.join("\n")
    );
}

/// The Python check finds a circle closed by a function-local import and
/// a parenthesised one, and not one in a docstring or comment.
#[test]
fn python_modules_import_each_other_one_way_finds_an_injected_circle() {
    let sources = |back: &str| {
        vec![
            (
                "p/__init__.py".to_owned(),
                "from .a import A\nfrom . import _ext\n".to_owned(),
            ),
            ("p/_ext.pyi".to_owned(), "def f() -> int: ...\n".to_owned()),
            (
                "p/a.py".to_owned(),
                "from ._b import (\n    B,\n)\nfrom . import _ext\nclass A: ...\n".to_owned(),
            ),
            (
                "p/_b.py".to_owned(),
                format!("\"\"\"\nfrom .a import A\n\"\"\"\n# from .a import A\nclass B: ...\n{back}"),
            ),
        ]
    };
    let one_way = module_graph::python_graph("p", &sources(""));
    assert!(module_graph::circles(&one_way).is_empty(), "{one_way:?}");
    assert!(one_way["p/a.py"].contains_key("p/_b.py") && one_way["p/a.py"].contains_key("p/_ext.pyi"));
    let back = module_graph::python_graph("p", &sources("def f():\n    from .a import A\n    return A\n"));
    let found = module_graph::circles(&back);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, ["p/_b.py", "p/a.py"], "{}", found[0].1);
}

/// The check above finds a circle between files, however the paths are
/// written: a grouped `crate::` import one way, a `super::` path back; a
/// parent's re-export of its child's item alone is no edge.
#[test]
fn modules_depend_on_each_other_one_way_finds_an_injected_circle() {
    let sources = |back: &str| {
        vec![
            ("lib.rs".to_owned(), "mod a;\nmod b;\nmod c;\n".to_owned()),
            (
                "a/mod.rs".to_owned(),
                "mod inner;\npub use inner::Thing;\nuse crate::{b::{X, Y as Z}, c::W};\n// crate::c::Gone\n".to_owned(),
            ),
            ("a/inner.rs".to_owned(), back.to_owned()),
            (
                "b.rs".to_owned(),
                "pub struct X; pub struct Y;\nfn f() { let _ = \"crate::a::Q\"; }\n".to_owned(),
            ),
            (
                "c.rs".to_owned(),
                "pub struct W;\n#[cfg(test)]\nmod tests { use crate::a::Thing; }\n".to_owned(),
            ),
        ]
    };
    // One way only: no circle (the comment, string and test module name
    // `a` from below without counting).
    let one_way = module_graph::Crate::from_sources(&sources("pub struct Thing;\n")).graph();
    assert!(module_graph::circles(&one_way).is_empty(), "{one_way:?}");
    assert!(one_way["a/mod.rs"].contains_key("b.rs") && one_way["a/mod.rs"].contains_key("c.rs"));
    // A child naming its parent's own item, the parent only re-exporting
    // the child's (`pub use inner::Thing`, its interface): one way.
    let mut with_back = sources("pub struct Thing;\nuse super::Helper;\n");
    with_back[1].1 += "pub struct Helper;\n";
    let graph = module_graph::Crate::from_sources(&with_back).graph();
    assert!(module_graph::circles(&graph).is_empty(), "{graph:?}");
    // The parent's own code naming the child's item too, by a path or by
    // the re-exported name: a circle a/mod.rs <-> a/inner.rs.
    for uses in [
        "fn make() -> inner::Thing { inner::Thing }\n",
        "fn make() -> Thing { Thing }\n",
    ] {
        let mut both = with_back.clone();
        both[1].1 += uses;
        let found = module_graph::circles(&module_graph::Crate::from_sources(&both).graph());
        assert_eq!(found.len(), 1, "{uses}: {found:?}");
        assert_eq!(found[0].0, ["a/inner.rs", "a/mod.rs"], "{}", found[0].1);
        assert!(
            found[0].1.contains("super::Helper") && found[0].1.contains("inner::Thing"),
            "{}",
            found[0].1
        );
    }
    // Across files, through a grouped import and a file-level module
    // three steps long: b -> c -> a/mod.rs -> b.
    let mut three = sources("pub struct Thing;\n");
    three[3].1 += "use crate::c::W;\n";
    three[1].1 += "pub struct Marker;\n";
    three[4].1 += "fn h() { crate::a::Marker; }\n";
    let found = module_graph::circles(&module_graph::Crate::from_sources(&three).graph());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, ["a/mod.rs", "b.rs", "c.rs"], "{}", found[0].1);
}

/// ARCHITECTURE.md: "One plan per sample": in the worker's shipped code
/// (the worker, its image path, the lanes' kernels) only the sample's plan
/// (`stoker_image::plan`) resolves draws into steps; the router makes it
/// once, and the CPU pool and the GPU lanes run it as it is (tests in
/// `worker/src/pipeline/route_tests.rs` check they receive that one).
#[test]
fn only_the_sample_plan_resolves_steps_in_the_worker() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["worker/src", "worker/image/src", "cuda/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    let resolvers: Vec<String> = files
        .iter()
        .filter(|path| !path.to_string_lossy().ends_with("_tests.rs"))
        .filter(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            ["resolve_steps", "resolve_with_targets"]
                .iter()
                .any(|ident| module_graph::ships_ident(&text, ident))
        })
        .map(|path| path.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/"))
        .collect();
    assert_eq!(
        resolvers,
        ["worker/image/src/plan.rs"],
        "files that resolve a sample's steps"
    );
    // The check sees a call where there is one.
    assert!(module_graph::ships_ident(
        "fn f() { stoker_core::resolve_steps(a, b, 1, 1); }",
        "resolve_steps"
    ));
    assert!(!module_graph::ships_ident(
        "// resolve_steps\n#[cfg(test)]\nmod tests { fn f() { resolve_steps(); } }",
        "resolve_steps"
    ));
}

/// The workspace crates whose job is a foreign interface: the only ones
/// that may hold `unsafe` (the Python extension, `client/python`, is a
/// workspace of its own and one too).
const FFI_CRATES: &[&str] = &["cuda", "libjpeg", "shm"];

/// The attribute every other crate root carries.
const FORBID_UNSAFE: &str = "#![forbid(unsafe_code)]";

/// The workspace's members, from the root manifest's `members` list.
fn workspace_members(manifest: &str) -> Vec<String> {
    let start = manifest
        .find("members = [")
        .expect("the root manifest lists its members");
    let list = &manifest[start + "members = [".len()..];
    list[..list.find(']').unwrap()]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect()
}

/// The crate roots of `member` (`src/lib.rs`, `src/main.rs`) that do not
/// forbid `unsafe`.
fn roots_allowing_unsafe(root: &std::path::Path, member: &str) -> Vec<String> {
    ["src/lib.rs", "src/main.rs"]
        .iter()
        .map(|f| root.join(member).join(f))
        .filter(|path| path.exists())
        .filter(|path| !has_inner_attribute(&std::fs::read_to_string(path).unwrap(), FORBID_UNSAFE))
        .map(|path| path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/"))
        .collect()
}

/// Whether `source` has `attr` as a line of its own (not in a comment).
fn has_inner_attribute(source: &str, attr: &str) -> bool {
    source.lines().any(|line| line.trim() == attr)
}

/// ARCHITECTURE.md: "Unsafe code only in the FFI crates": every workspace
/// crate but the FFI crates forbids `unsafe` at its root, so the compiler
/// refuses an `unsafe` block anywhere in it (the worker's orchestration of
/// the GPU included: it launches kernels and decodes through
/// `stoker-cuda`'s safe types); each FFI crate does hold some, so the list
/// stays as short as it can be.
#[test]
fn unsafe_code_lives_only_in_the_ffi_crates() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let members = workspace_members(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap());
    assert!(
        members.len() >= 10 && members.iter().any(|m| m == "cuda"),
        "{members:?}"
    );
    let mut wrong = Vec::new();
    for member in &members {
        if FFI_CRATES.contains(&member.as_str()) {
            let mut files = Vec::new();
            rust_files(&root.join(member).join("src"), &mut files);
            let holds = files
                .iter()
                .any(|f| module_graph::ships_ident(&std::fs::read_to_string(f).unwrap(), "unsafe"));
            assert!(
                holds,
                "{member} holds no unsafe code: take it off FFI_CRATES and forbid it"
            );
        } else {
            wrong.extend(roots_allowing_unsafe(&root, member));
        }
    }
    assert!(wrong.is_empty(), "crate roots without {FORBID_UNSAFE}: {wrong:?}");
    // The check sees a root without the attribute, and none in a comment.
    assert!(has_inner_attribute(
        "//! doc\n\n#![forbid(unsafe_code)]\n",
        FORBID_UNSAFE
    ));
    assert!(!has_inner_attribute(
        "// #![forbid(unsafe_code)]\nfn f() {}\n",
        FORBID_UNSAFE
    ));
    assert_eq!(
        workspace_members("[workspace]\nmembers = [\"core\", \"cuda\"]\n"),
        ["core", "cuda"]
    );
}

/// ARCHITECTURE.md: "Protobuf stays at the edge": outside the proto crate,
/// only the gRPC edges' files name `pb` types (shipped code and tests
/// alike; the CLI speaks in the libraries' types).
#[test]
fn protobuf_types_stay_at_the_grpc_edges() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let edges = [
        "worker/src/service.rs",
        "worker/src/chained.rs",
        "client/src/wire.rs",
        "client/src/wire/chunks.rs",
    ];
    let mut files = Vec::new();
    for krate in ["core/src", "worker/src", "client/src", "cli/src"] {
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

/// `name version` of every package a Cargo.lock pins.
fn locked_versions(lock: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut name = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"').to_owned());
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name.take()) {
            out.insert((n, v.trim_matches('"').to_owned()));
        }
    }
    out
}

/// The `key = value` lines of a manifest's `[profile.release]`, comments
/// left out.
fn release_profile(manifest: &str) -> Vec<String> {
    manifest
        .lines()
        .skip_while(|l| l.trim() != "[profile.release]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .map(|l| l.split('#').next().unwrap_or_default().trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The Python package is a workspace of its own (client/python), built by
/// maturin into the repository's target directory: its crates are the
/// main workspace's, compiled once for both, only while both pin the same
/// versions with the same release profile.
#[test]
fn the_python_package_shares_the_workspace_s_versions_profile_and_target() {
    let root = crate::support::repo_root();
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (main, python) = (
        locked_versions(&read("Cargo.lock")),
        locked_versions(&read("client/python/Cargo.lock")),
    );
    assert!(main.len() > 100 && python.len() > 100, "lock files not parsed");
    let main_names: BTreeMap<&str, Vec<&str>> = main.iter().fold(BTreeMap::new(), |mut m, (n, v)| {
        m.entry(n.as_str()).or_default().push(v.as_str());
        m
    });
    let differ: Vec<String> = python
        .iter()
        .filter(|(n, v)| main_names.get(n.as_str()).is_some_and(|vs| !vs.contains(&v.as_str())))
        .map(|(n, v)| format!("{n} {v} (workspace: {})", main_names[n.as_str()].join(", ")))
        .collect();
    assert!(
        differ.is_empty(),
        "client/python/Cargo.lock pins other versions than Cargo.lock (copy Cargo.lock over it and run \
         `cargo tree --manifest-path client/python/Cargo.toml`, which adds the package's own): {differ:?}"
    );
    let main_profile = release_profile(&read("Cargo.toml"));
    assert!(!main_profile.is_empty(), "no [profile.release] in Cargo.toml");
    assert_eq!(
        release_profile(&read("client/python/Cargo.toml")),
        main_profile,
        "client/python's [profile.release] differs from the workspace's"
    );
    let config = read("client/python/.cargo/config.toml");
    assert!(
        config
            .lines()
            .any(|l| l.replace(' ', "") == "target-dir=\"../../target\""),
        "client/python/.cargo/config.toml does not build into the repository's target/: {config}"
    );
}
