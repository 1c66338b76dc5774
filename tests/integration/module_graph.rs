//! The file-level module graph of a crate, read from its sources, and the
//! circles in it (ARCHITECTURE.md: "Modules depend on each other one
//! way"), for `architecture::modules_depend_on_each_other_one_way`.
//!
//! A module is a file (`a/b.rs` or `a/b/mod.rs`; the crate root is
//! `lib.rs` or `main.rs`). An edge runs from a file to every other file
//! that one of its paths names: `crate::`, `super::` and `self::` paths,
//! and paths that start at a child module, in `use` trees (with their
//! `{...}` groups, nested) and in code alike. A path names the file where
//! its item is defined: `super::X` is the parent file when `X` is the
//! parent's own item, and the file `X` comes from when the parent only
//! imports or re-exports it. A parent's `mod child;` is not an edge, and
//! neither is a re-export of one of its descendants' items (`pub use
//! child::X`, at any `pub` visibility): that is the parent's interface,
//! naming the child for others, not a dependency of the parent's own
//! code, so a facade module whose children share items defined below them
//! makes no circle. A path through the re-export still leads to the file
//! that defines `X`, and where the file's own code names `X` as well, the
//! `pub use` is an edge like any import. What tests alone compile
//! (`#[cfg(test)]` items, `tests.rs`) and comments and string literals are
//! left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One file-level module.
#[derive(Debug, Default)]
struct File {
    /// The file, relative to the crate's folder, for messages.
    name: String,
    /// The paths its shipped code names, each from the file's own
    /// module (an inline `mod` adds its name).
    paths: Vec<(Vec<String>, Vec<String>)>,
    /// The paths of its `pub use` re-exports whose names its own code does
    /// not use, each from the file's own module: an edge only when the
    /// item is not its own descendant's.
    reexports: Vec<(Vec<String>, Vec<String>)>,
    /// The names its `use` declarations bring in: name -> (the module the
    /// `use` sits in, the path it names).
    imports: BTreeMap<String, (Vec<String>, Vec<String>)>,
    /// Its inline modules (`mod name { ... }`), as paths within it.
    inline: Vec<Vec<String>>,
}

/// The module graph: file name -> (file name it depends on -> the paths
/// that make the edge, as written).
pub type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    Colons,
    Punct(char),
}

/// The tokens that matter for paths, without comments, string and char
/// literals, lifetimes or numbers.
fn tokens(text: &str) -> Vec<Token> {
    let b: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                i += if b[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == 'r' && (next == Some('#') || next == Some('"')) && raw_string_end(&b, i).is_some() {
            i = raw_string_end(&b, i).unwrap_or(b.len());
        } else if c == 'b' && next == Some('\'') {
            i += 1;
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                i += 3;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            let word: String = b[start..i].iter().collect();
            // b"..." and r"..." prefixes are not identifiers.
            if i < b.len() && b[i] == '"' && (word == "b" || word == "br" || word == "c") {
                continue;
            }
            out.push(Token::Ident(word));
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_' || b[i] == '.') {
                i += 1;
            }
        } else if c == ':' && next == Some(':') {
            out.push(Token::Colons);
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(Token::Punct(c));
            }
            i += 1;
        }
    }
    out
}

/// Where a raw string starting at `i` (`r"`, `r#"`...) ends.
fn raw_string_end(b: &[char], i: usize) -> Option<usize> {
    let mut j = i + 1;
    let mut hashes = 0;
    while b.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if b.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < b.len() {
        if b[j] == '"' && (1..=hashes).all(|k| b.get(j + k) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(b.len())
}

/// Drops each item marked `#[cfg(test)]`: the attribute, then up to the
/// item's `;` or its closing brace.
fn without_test_items(t: Vec<Token>) -> Vec<Token> {
    let attr = |i: usize| -> bool {
        let want = [
            Token::Punct('#'),
            Token::Punct('['),
            Token::Ident("cfg".into()),
            Token::Punct('('),
            Token::Ident("test".into()),
            Token::Punct(')'),
            Token::Punct(']'),
        ];
        t.get(i..i + want.len()) == Some(&want[..])
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if !attr(i) {
            out.push(t[i].clone());
            i += 1;
            continue;
        }
        i += 7;
        let mut depth = 0i32;
        while i < t.len() {
            match t[i] {
                Token::Punct('(') | Token::Punct('[') => depth += 1,
                Token::Punct(')') | Token::Punct(']') => depth -= 1,
                Token::Punct(';') if depth == 0 => break,
                Token::Punct('{') if depth == 0 => {
                    let mut braces = 0;
                    while i < t.len() {
                        match t[i] {
                            Token::Punct('{') => braces += 1,
                            Token::Punct('}') => {
                                braces -= 1;
                                if braces == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        i += 1;
                    }
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        i += 1;
    }
    out
}

/// A use tree or path at `t[i..]`: every full path it spells (a group's
/// members each with the prefix before it; `self` in a group is the
/// prefix itself), each with the name it brings in (its last segment, or
/// the `as` name). Returns where it ends.
fn path_tree(t: &[Token], mut i: usize, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) -> usize {
    let mut segs = prefix.to_vec();
    loop {
        match t.get(i) {
            Some(Token::Ident(s)) => {
                if s != "self" || segs.is_empty() {
                    segs.push(s.clone());
                }
                i += 1;
            }
            Some(Token::Punct('{')) => {
                i += 1;
                loop {
                    match t.get(i) {
                        Some(Token::Punct('}')) => return i + 1,
                        Some(Token::Punct(',')) => i += 1,
                        None => return i,
                        _ => {
                            let before = i;
                            i = path_tree(t, i, &segs, out);
                            if i == before {
                                i += 1;
                            }
                        }
                    }
                }
            }
            Some(Token::Punct('*')) => return i + 1,
            _ => return i,
        }
        if t.get(i) == Some(&Token::Colons) {
            i += 1;
            continue;
        }
        break;
    }
    if segs.len() > prefix.len() || !segs.is_empty() {
        let mut name = segs.last().cloned().unwrap_or_default();
        if t.get(i) == Some(&Token::Ident("as".into()))
            && let Some(Token::Ident(alias)) = t.get(i + 1)
        {
            name = alias.clone();
            i += 2;
        }
        out.push((segs, name));
    }
    i
}

/// Whether the `use` at `t[i]` is `pub` (`pub`, `pub(crate)`,
/// `pub(super)`, `pub(in path)`).
fn is_pub(t: &[Token], i: usize) -> bool {
    let public = Token::Ident("pub".into());
    match i.checked_sub(1).map(|j| &t[j]) {
        Some(x) if *x == public => true,
        Some(Token::Punct(')')) => {
            let open = t[..i].iter().rposition(|x| *x == Token::Punct('('));
            open.is_some_and(|o| o > 0 && t[o - 1] == public)
        }
        _ => false,
    }
}

/// Reads one file: its paths and imports.
fn read_file(name: String, text: &str) -> File {
    let t = without_test_items(tokens(text));
    let mut file = File {
        name,
        ..File::default()
    };
    // Inline modules: (name, brace depth at which it closes).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        let here: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
        match &t[i] {
            Token::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Token::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Token::Ident(k) if k == "mod" => {
                if let (Some(Token::Ident(m)), Some(Token::Punct('{'))) = (t.get(i + 1), t.get(i + 2)) {
                    inline.push((m.clone(), depth + 1));
                    let mut path = here.clone();
                    path.push(m.clone());
                    file.inline.push(path);
                }
                i += 2;
            }
            Token::Ident(k) if k == "use" => {
                let mut found = Vec::new();
                let start = if t.get(i + 1) == Some(&Token::Colons) {
                    i + 2
                } else {
                    i + 1
                };
                let public = is_pub(&t, i);
                i = path_tree(&t, start, &[], &mut found).max(i + 1);
                for (path, alias) in found {
                    // The name appears once in the `use` itself; more
                    // often, and the file's own code uses it.
                    let named = t.iter().filter(|x| **x == Token::Ident(alias.clone())).count();
                    file.imports.insert(alias, (here.clone(), path.clone()));
                    if public && named <= 1 {
                        file.reexports.push((here.clone(), path));
                    } else {
                        file.paths.push((here.clone(), path));
                    }
                }
            }
            Token::Ident(_) if t.get(i + 1) == Some(&Token::Colons) && (i == 0 || t[i - 1] != Token::Colons) => {
                let mut found = Vec::new();
                i = path_tree(&t, i, &[], &mut found).max(i + 1);
                file.paths.extend(found.into_iter().map(|(p, _)| (here.clone(), p)));
            }
            _ => i += 1,
        }
    }
    file
}

/// One crate's files, by module path (`[]` is the root).
#[derive(Debug)]
pub struct Crate {
    files: BTreeMap<Vec<String>, File>,
    /// Each module's child modules that are files or inline.
    children: BTreeMap<Vec<String>, BTreeSet<String>>,
}

impl Crate {
    /// A crate from `(path relative to src, text)` pairs; `lib.rs` or
    /// `main.rs` is the root.
    pub fn from_sources(sources: &[(String, String)]) -> Self {
        let mut files = BTreeMap::new();
        let mut children: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
        for (rel, text) in sources {
            let rel = rel.replace('\\', "/");
            let Some(stem) = rel.strip_suffix(".rs") else { continue };
            let mut module: Vec<String> = stem.split('/').map(str::to_owned).collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                module.pop();
            }
            if module.iter().any(|m| m == "tests") {
                continue;
            }
            for k in 0..module.len() {
                children
                    .entry(module[..k].to_vec())
                    .or_default()
                    .insert(module[k].clone());
            }
            let file = read_file(rel.clone(), text);
            for inside in &file.inline {
                for k in 0..inside.len() {
                    let mut parent = module.clone();
                    parent.extend_from_slice(&inside[..k]);
                    children.entry(parent).or_default().insert(inside[k].clone());
                }
            }
            files.insert(module, file);
        }
        Self { files, children }
    }

    /// Every `.rs` file under `src` (but a `main.rs` next to a `lib.rs`,
    /// a crate of its own that names the library by its crate name).
    pub fn read(src: &Path) -> Self {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        let has_lib = src.join("lib.rs").exists();
        let sources: Vec<(String, String)> = paths
            .into_iter()
            .filter(|p| !(has_lib && p == &src.join("main.rs")))
            .filter(|p| !p.components().any(|c| c.as_os_str() == "bin"))
            .map(|p| {
                let rel = p.strip_prefix(src).unwrap().to_string_lossy().into_owned();
                (rel, std::fs::read_to_string(&p).unwrap())
            })
            .collect();
        Self::from_sources(&sources)
    }

    /// `path`, named from module `at`, as a module path with the item's
    /// segments after it; `None` for a path outside the crate (another
    /// crate, a local name).
    fn absolute(&self, at: &[String], path: &[String]) -> Option<Vec<String>> {
        let first = path.first()?;
        let mut rest = &path[1..];
        let mut base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "self" => at.to_vec(),
            "super" => {
                let mut b = at.to_vec();
                b.pop()?;
                while rest.first().is_some_and(|s| s == "super") {
                    b.pop()?;
                    rest = &rest[1..];
                }
                b
            }
            child if self.children.get(at).is_some_and(|c| c.contains(child)) => {
                let mut b = at.to_vec();
                b.push(child.to_owned());
                b
            }
            _ => return None,
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The file that defines what the absolute `path` names, following
    /// imports and re-exports (at most `hops` of them).
    fn defining_file(&self, path: &[String], hops: usize) -> Option<Vec<String>> {
        let k = (0..=path.len()).rev().find(|k| self.files.contains_key(&path[..*k]))?;
        let module = path[..k].to_vec();
        let rest = &path[k..];
        if let Some(name) = rest.first()
            && hops > 0
            && let Some((at, via)) = self.files[&module].imports.get(name)
        {
            let mut from = module.clone();
            from.extend(at.iter().cloned());
            // `None`: an item of another crate, imported here.
            let mut target = self.absolute(&from, via)?;
            target.extend(rest[1..].iter().cloned());
            return self.defining_file(&target, hops - 1);
        }
        Some(module)
    }

    /// The file-level graph.
    pub fn graph(&self) -> Graph {
        let mut graph = Graph::new();
        for (module, file) in &self.files {
            let edges = graph.entry(file.name.clone()).or_default();
            let reexports = file.reexports.iter().map(|p| (p, true));
            for ((inside, path), reexport) in file.paths.iter().map(|p| (p, false)).chain(reexports) {
                let mut at = module.clone();
                at.extend(inside.iter().cloned());
                // A path may start at a name the file imported (`use
                // super::nvjpeg;` then `nvjpeg::Handle`).
                let absolute = match file.imports.get(&path[0]) {
                    Some((inside, via)) if path.len() > 1 && via.last() == Some(&path[0]) => {
                        let mut from = module.clone();
                        from.extend(inside.iter().cloned());
                        self.absolute(&from, via).map(|mut a| {
                            a.extend(path[1..].iter().cloned());
                            a
                        })
                    }
                    _ => self.absolute(&at, path),
                };
                // A re-export of the file's own descendant's item: interface.
                if reexport
                    && absolute
                        .as_ref()
                        .is_some_and(|a| a.len() > module.len() && a.starts_with(module))
                {
                    continue;
                }
                let Some(target) = absolute.and_then(|a| self.defining_file(&a, 8)) else {
                    continue;
                };
                if &target != module {
                    edges
                        .entry(self.files[&target].name.clone())
                        .or_default()
                        .insert(path.join("::"));
                }
            }
        }
        graph
    }
}

/// Every `.rs` file under `dir`, into `out`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The circles of `graph`: each strongly connected set of more than one
/// file, as one circle through it, every edge with the paths that make it
/// ("a.rs -> b.rs (b::X) -> a.rs (super::Y)").
pub fn circles(graph: &Graph) -> Vec<(Vec<String>, String)> {
    // Tarjan's algorithm, iterative enough for the small graphs here.
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        sets: Vec<Vec<&'g str>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flat_map(|e| e.keys()) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                set.push(w);
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                s.sets.push(set);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        sets: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    let mut out = Vec::new();
    for set in s.sets {
        let members: BTreeSet<&str> = set.iter().copied().collect();
        let start = *members.iter().next().unwrap();
        // The shortest way back to `start` within the set (breadth first).
        let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut end = None;
        'search: while let Some(v) = queue.pop_front() {
            for w in graph[v].keys().map(String::as_str).filter(|w| members.contains(w)) {
                if w == start {
                    end = Some(v);
                    break 'search;
                }
                if !came_from.contains_key(w) {
                    came_from.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        let mut walk = vec![start];
        let mut v = end.unwrap();
        while v != start {
            walk.push(v);
            v = came_from[v];
        }
        walk[1..].reverse();
        walk.push(start);
        let mut text = start.to_owned();
        for pair in walk.windows(2) {
            let why: Vec<&str> = graph[pair[0]][pair[1]].iter().map(String::as_str).collect();
            text += &format!(" -> {} ({})", pair[1], why.join(", "));
        }
        let all: Vec<String> = members.iter().map(|m| (*m).to_owned()).collect();
        if members.len() > walk.len() - 1 {
            text += &format!(" [all in this circle: {}]", all.join(", "));
        }
        out.push((all, text));
    }
    out
}

/// The module graph of a Python package from its sources ((file name,
/// text) pairs under the package's folder, `PACKAGE/a.py`,
/// `PACKAGE/__init__.py`, and `PACKAGE/b.pyi` for an extension module
/// `b` that has no `.py`): an edge runs
/// from a file to every module of the package it imports, at any
/// indentation (a function-local import is an edge too): `from .a import
/// x`, `from . import a`, `import PACKAGE.a`, `from PACKAGE import a`.
/// Docstrings and comments are left out; a name that is no file of the
/// package (an extension module, an item of `__init__`) is the package's
/// `__init__.py`.
pub fn python_graph(package: &str, sources: &[(String, String)]) -> Graph {
    let module_of = |name: &str| {
        let stem = name
            .strip_suffix(".pyi")
            .or_else(|| name.strip_suffix(".py"))
            .unwrap_or(name);
        stem.trim_end_matches("/__init__").replace('/', ".")
    };
    let files: BTreeMap<String, String> = sources.iter().map(|(n, _)| (module_of(n), n.clone())).collect();
    let init = format!("{package}/__init__.py");
    let mut graph = Graph::new();
    for (name, text) in sources {
        let edges = graph.entry(name.clone()).or_default();
        let (mut in_doc, mut pending): (bool, Option<String>) = (false, None);
        for raw in text.lines() {
            let line = raw.split('#').next().unwrap_or_default().trim();
            if line.matches("\"\"\"").count() % 2 == 1 {
                in_doc = !in_doc;
                continue;
            }
            if in_doc {
                continue;
            }
            // The rest of a parenthesised `from X import (...)`.
            let statement = match pending.take() {
                Some(head) => format!("{head} {line}"),
                None if line.starts_with("from ") || line.starts_with("import ") => line.to_owned(),
                None => continue,
            };
            if statement.contains('(') && !statement.contains(')') {
                pending = Some(statement);
                continue;
            }
            let statement = statement.replace(['(', ')'], " ");
            let mut targets = Vec::new();
            if let Some(rest) = statement.strip_prefix("from ") {
                let (module, names) = rest.split_once(" import ").unwrap_or((rest, ""));
                let module = module.trim();
                let base = match module.strip_prefix('.') {
                    Some(sub) => (!sub.starts_with('.')).then(|| sub.to_owned()),
                    None => module
                        .strip_prefix(package)
                        .map(|s| s.trim_start_matches('.').to_owned()),
                };
                let Some(base) = base else { continue };
                if base.is_empty() {
                    targets.extend(
                        names
                            .split(',')
                            .filter_map(|n| n.split_whitespace().next())
                            .map(str::to_owned),
                    );
                } else {
                    targets.push(base);
                }
            } else if let Some(rest) = statement.strip_prefix("import ") {
                let prefix = format!("{package}.");
                targets.extend(
                    rest.split(',')
                        .filter_map(|n| n.split_whitespace().next()?.strip_prefix(&prefix).map(str::to_owned)),
                );
            }
            for target in targets {
                let file = files.get(&format!("{package}.{target}")).unwrap_or(&init);
                if file != name {
                    edges
                        .entry(file.clone())
                        .or_default()
                        .insert(statement.trim().to_owned());
                }
            }
        }
    }
    for file in files.values() {
        graph.entry(file.clone()).or_default();
    }
    graph
}

/// Whether the shipped code of `text` (comments, string literals and
/// `#[cfg(test)]` items left out) names `ident`.
pub fn ships_ident(text: &str, ident: &str) -> bool {
    without_test_items(tokens(text))
        .iter()
        .any(|t| matches!(t, Token::Ident(name) if name == ident))
}
