//! The documentation's relative links: every `[text](target)` and
//! reference link in README.md, ARCHITECTURE.md and docs/*.md names a file
//! or folder that exists, and every `#anchor` names a heading of its page,
//! by GitHub's slug. Links in fenced code blocks and inline code are not
//! links, and web and mail addresses are not checked.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::support::repo_root;

/// The Markdown files whose links are checked, relative to `root`.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    if let Ok(entries) = std::fs::read_dir(root.join("docs")) {
        let mut docs: Vec<PathBuf> = entries
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        docs.sort();
        pages.extend(docs);
    }
    pages.into_iter().filter(|p| p.exists()).collect()
}

/// Whether `line` opens or closes a fenced code block: up to three spaces,
/// then three or more backticks or tildes.
fn fence(line: &str) -> Option<(char, usize)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent..];
    let c = rest.chars().next()?;
    let run = rest.chars().take_while(|&x| x == c).count();
    (indent <= 3 && (c == '`' || c == '~') && run >= 3).then_some((c, run))
}

/// The text with fenced code blocks blanked out (newlines kept, so byte
/// offsets keep their line numbers).
fn without_fences(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut open: Option<(char, usize)> = None;
    for line in text.split_inclusive('\n') {
        let f = fence(line);
        let code = match (open, f) {
            (None, Some(f)) => {
                open = Some(f);
                true
            }
            (Some((c, n)), Some((c2, n2))) if c == c2 && n2 >= n && line.trim().chars().all(|x| x == c) => {
                open = None;
                true
            }
            (Some(_), _) => true,
            (None, None) => false,
        };
        if code {
            out.extend(line.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
        } else {
            out.push_str(line);
        }
    }
    out
}

/// The text with fenced code blocks and inline code blanked out.
fn prose(text: &str) -> String {
    blank_code_spans(&without_fences(text))
}

/// Blanks inline code: a run of n backticks up to the next run of exactly
/// n, within one paragraph. A run without its closing run stays as text.
fn blank_code_spans(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let run_at = |i: usize| b[i..].iter().take_while(|&&c| c == b'`').count();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'`' {
            i += 1;
            continue;
        }
        let n = run_at(i);
        let mut j = i + n;
        let mut close = None;
        while j < b.len() {
            if b[j..].starts_with(b"\n\n") {
                break;
            }
            if b[j] == b'`' {
                let m = run_at(j);
                if m == n {
                    close = Some(j + m);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                for c in &mut out[i..end] {
                    if *c != b'\n' {
                        *c = b' ';
                    }
                }
                i = end;
            }
            None => i += n,
        }
    }
    // Only ASCII bytes were replaced by ASCII spaces, whole code spans at a
    // time, so the text is still UTF-8.
    String::from_utf8(out).unwrap()
}

/// GitHub's anchor for a heading's text: lowercase, characters other than
/// letters, digits, spaces, hyphens and underscores dropped, spaces to
/// hyphens. A link's text counts, not its target.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    while let Some(start) = rest.find('[') {
        let Some(mid) = rest[start..].find("](") else { break };
        let Some(end) = rest[start + mid..].find(')') else {
            break;
        };
        text.push_str(&rest[..start]);
        text.push_str(&rest[start + 1..start + mid]);
        rest = &rest[start + mid + end + 1..];
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's ATX headings, duplicates numbered as GitHub
/// numbers them (`-1`, `-2`, ...).
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for line in without_fences(text).lines() {
        let trimmed = line.trim_start_matches(' ');
        if line.len() - trimmed.len() > 3 {
            continue;
        }
        let level = trimmed.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&level) {
            continue;
        }
        let rest = &trimmed[level..];
        if !(rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t')) {
            continue;
        }
        let title = rest.trim().trim_end_matches('#').trim_end();
        let base = slug(title);
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
        *n += 1;
    }
    out
}

/// A link found in a page: its 1-based line and its target as written.
struct Link {
    line: usize,
    target: String,
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// Inline links and images (`[text](target)`, `![alt](target)`), reference
/// definitions (`[label]: target`), and reference uses (`[text][label]`,
/// which must be defined: they come back as the target `[label]`).
fn links(text: &str) -> Vec<Link> {
    let p = prose(text);
    let mut found = Vec::new();
    let mut defined = Vec::new();
    // Reference definitions: a line of its own, up to three spaces in.
    let mut offset = 0;
    for line in p.split_inclusive('\n') {
        let t = line.trim_start_matches(' ');
        if line.len() - t.len() <= 3
            && t.starts_with('[')
            && let Some(close) = t.find("]:")
            && close > 1
        {
            let target = t[close + 2..].split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            defined.push(t[1..close].to_lowercase());
            found.push(Link {
                line: line_of(&p, offset),
                target: target.to_owned(),
            });
        }
        offset += line.len();
    }
    // Inline links: `](` then the destination up to its closing parenthesis
    // (balanced), or within `<...>`; a title after a space is not the target.
    let mut from = 0;
    while let Some(at) = p[from..].find("](") {
        let start = from + at + 2;
        let rest = &p[start..];
        let target = if let Some(inner) = rest.strip_prefix('<') {
            inner.split('>').next().unwrap_or("").to_owned()
        } else {
            let mut depth = 0usize;
            let end = rest
                .char_indices()
                .find(|&(_, c)| match c {
                    '(' => {
                        depth += 1;
                        false
                    }
                    ')' if depth == 0 => true,
                    ')' => {
                        depth -= 1;
                        false
                    }
                    c => c.is_whitespace(),
                })
                .map_or(rest.len(), |(i, _)| i);
            rest[..end].to_owned()
        };
        found.push(Link {
            line: line_of(&p, start),
            target,
        });
        from = start;
    }
    // Reference uses: `][label]` with a label that is not empty.
    let mut from = 0;
    while let Some(at) = p[from..].find("][") {
        let start = from + at + 2;
        if let Some(end) = p[start..].find(']') {
            let label = &p[start..start + end];
            if !label.is_empty() && !label.contains('\n') && !defined.contains(&label.to_lowercase()) {
                found.push(Link {
                    line: line_of(&p, start),
                    target: format!("[{label}]"),
                });
            }
        }
        from = start;
    }
    found.sort_by_key(|l| l.line);
    found
}

/// Every broken relative link of the pages under `root`, as
/// `FILE:LINE: TARGET: why`.
fn broken_links(root: &Path) -> Vec<String> {
    let mut anchors_of: HashMap<PathBuf, Vec<String>> = HashMap::new();
    let mut broken = Vec::new();
    for page in pages(root) {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(root).unwrap_or(&page).display().to_string();
        for link in links(&text) {
            let target = link.target.as_str();
            let mut fail = |why: String| broken.push(format!("{name}:{}: ({target}): {why}", link.line));
            if target.starts_with('[') {
                fail("a reference link whose label is not defined".into());
                continue;
            }
            let lower = target.to_ascii_lowercase();
            if ["http://", "https://", "mailto:"].iter().any(|s| lower.starts_with(s)) {
                continue;
            }
            let (path, anchor) = target.split_once('#').map_or((target, None), |(p, a)| (p, Some(a)));
            let file = if path.is_empty() {
                page.clone()
            } else if let Some(abs) = path.strip_prefix('/') {
                root.join(abs)
            } else {
                page.parent().unwrap().join(path.replace("%20", " "))
            };
            if !file.exists() {
                fail(format!("{} does not exist", file.display()));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if file.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let file = file.canonicalize().unwrap();
            let known = anchors_of
                .entry(file.clone())
                .or_insert_with(|| anchors(&std::fs::read_to_string(&file).unwrap()));
            if !known.iter().any(|a| a == anchor) {
                fail(format!("no heading of {} has the anchor #{anchor}", file.display()));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_resolves() {
    let root = repo_root();
    assert!(root.join("docs").is_dir(), "no docs/ under {}", root.display());
    let broken = broken_links(&root);
    assert!(
        broken.is_empty(),
        "{} broken link(s) in the documentation:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn a_broken_link_or_anchor_is_reported_and_code_is_not_a_link() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    std::fs::create_dir(r.join("docs")).unwrap();
    std::fs::write(
        r.join("README.md"),
        "# Top\n\n## `stoker worker` flags\n\n## Top\n\n\
         [ok](docs/a.md#a-page) [ok](#stoker-worker-flags) [ok](#top-1) [ok](docs/)\n\
         [web](https://example.com/missing) [mail](mailto:x@example.com)\n\
         `[code](missing.md)` and\n\n```\n[fenced](missing.md)\n```\n\
         [gone](docs/missing.md)\n\
         [bad anchor](docs/a.md#nowhere)\n\
         [ref][r] [undefined][nope]\n\n[r]: docs/b.md\n",
    )
    .unwrap();
    std::fs::write(r.join("docs/a.md"), "# A page\n\n[up](../README.md#top)\n").unwrap();
    let broken = broken_links(r);
    let lines: Vec<&str> = broken.iter().map(String::as_str).collect();
    assert_eq!(broken.len(), 4, "{lines:#?}");
    assert!(broken[0].starts_with("README.md:14: (docs/missing.md)"), "{lines:#?}");
    assert!(
        broken[1].starts_with("README.md:15: (docs/a.md#nowhere): no heading"),
        "{lines:#?}"
    );
    assert!(broken.iter().any(|b| b.contains("(docs/b.md)")), "{lines:#?}");
    assert!(broken.iter().any(|b| b.contains("([nope])")), "{lines:#?}");
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug("`stoker worker`"), "stoker-worker");
    assert_eq!(slug("GPU workers, on two H200s"), "gpu-workers-on-two-h200s");
    assert_eq!(
        slug("Same pixels: against torchvision, and CPU against GPU"),
        "same-pixels-against-torchvision-and-cpu-against-gpu"
    );
    assert_eq!(
        slug("Fields: captions, metadata, multi-labels"),
        "fields-captions-metadata-multi-labels"
    );
    assert_eq!(slug("See [the docs](x.md) now"), "see-the-docs-now");
}
