//! The part of YAML an Ultralytics `data.yaml` uses ([`parse`]): top-level
//! `key: value` lines whose values are scalars, flow lists (`[a, b]`),
//! block lists (`- a`) or one-level maps (`0: person`); block scalars
//! (`download: |`) are skipped, comments dropped. No YAML crate is in the
//! workspace, and this is all a dataset description needs; anything else
//! is an error naming the line.

use std::collections::BTreeMap;

/// A top-level value.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Value {
    Null,
    Scalar(String),
    List(Vec<String>),
    Map(Vec<(String, String)>),
}

/// The top-level keys of `text` with their values.
pub(super) fn parse(text: &str) -> Result<BTreeMap<String, Value>, String> {
    let lines: Vec<(usize, String)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, strip_comment(l).trim_end().to_owned()))
        .filter(|(_, l)| !l.trim().is_empty() && l.trim() != "---")
        .collect();
    let mut out = BTreeMap::new();
    let mut i = 0;
    while i < lines.len() {
        let (n, line) = &lines[i];
        i += 1;
        if line.starts_with([' ', '\t']) {
            return Err(format!("line {n}: indented line without a key above it: {line:?}"));
        }
        let Some((key, rest)) = split_key(line) else {
            return Err(format!("line {n}: not a `key: value` line: {line:?}"));
        };
        // The lines of its block: indented, or a list at column 0.
        let start = i;
        while i < lines.len() && (lines[i].1.starts_with([' ', '\t']) || lines[i].1.starts_with("- ")) {
            i += 1;
        }
        let block = &lines[start..i];
        let value = if rest.starts_with('|') || rest.starts_with('>') {
            Value::Scalar(block.iter().map(|(_, l)| l.trim()).collect::<Vec<_>>().join("\n"))
        } else if !rest.is_empty() {
            let mut text = rest.to_owned();
            for (_, l) in block {
                text.push(' ');
                text.push_str(l.trim());
            }
            inline(&text).map_err(|e| format!("line {n}: {e}"))?
        } else if block.is_empty() {
            Value::Null
        } else if block.iter().all(|(_, l)| l.trim_start().starts_with('-')) {
            Value::List(block.iter().map(|(_, l)| unquote(l.trim_start()[1..].trim())).collect())
        } else {
            let mut map = Vec::new();
            for (m, l) in block {
                let Some((k, v)) = split_key(l.trim()) else {
                    return Err(format!("line {m}: not a `key: value` line: {l:?}"));
                };
                map.push((unquote(k), unquote(v)));
            }
            Value::Map(map)
        };
        out.insert(unquote(key), value);
    }
    Ok(out)
}

/// A value on its key's line: a flow list or a scalar.
fn inline(text: &str) -> Result<Value, String> {
    let text = text.trim();
    if let Some(inner) = text.strip_prefix('[') {
        let Some(inner) = inner.strip_suffix(']') else {
            return Err(format!("a list without its closing bracket: {text:?}"));
        };
        if inner.trim().is_empty() {
            return Ok(Value::List(Vec::new()));
        }
        return Ok(Value::List(
            split_outside_quotes(inner).iter().map(|s| unquote(s)).collect(),
        ));
    }
    if text.starts_with('{') {
        return Err(format!("flow maps are not read: {text:?}"));
    }
    if matches!(text, "~" | "null" | "Null" | "NULL") {
        return Ok(Value::Null);
    }
    Ok(Value::Scalar(unquote(text)))
}

/// `key: rest`, the key maybe quoted.
fn split_key(line: &str) -> Option<(&str, &str)> {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '"' | '\'') => quote = Some(c),
            (None, ':') if line[i + 1..].is_empty() || line[i + 1..].starts_with([' ', '\t']) => {
                return Some((line[..i].trim(), line[i + 1..].trim()));
            }
            _ => {}
        }
    }
    None
}

/// `line` without its comment: `#` at its start or after a space, outside
/// quotes.
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') if prev.is_whitespace() => return &line[..i],
            _ => {}
        }
        prev = c;
    }
    line
}

/// Splits a flow list's items at commas outside quotes.
fn split_outside_quotes(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut quote, mut start) = (None, 0);
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '"' | '\'') => quote = Some(c),
            (None, ',') => {
                out.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = text[start..].trim();
    if !last.is_empty() {
        out.push(last);
    }
    out
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    for q in ['"', '\''] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            return s[1..s.len() - 1].to_owned();
        }
    }
    s.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_ultralytics_data_yamls_hold() {
        let text = "# COCO8-pose\npath: ../datasets/coco8-pose # root\ntrain: images/train\nval: [images/val, 'images/extra']\n\
                    test:\n\nkpt_shape: [17, 3]\nflip_idx: [0, 2, 1]\nnames:\n  0: person\n  1: 'traffic light'\n\
                    download: |\n  from x import y\n  y('a: b')\nalt:\n- a # one\n- \"b c\"\n";
        let y = parse(text).unwrap();
        assert_eq!(y["path"], Value::Scalar("../datasets/coco8-pose".into()));
        assert_eq!(y["val"], Value::List(vec!["images/val".into(), "images/extra".into()]));
        assert_eq!(y["test"], Value::Null);
        assert_eq!(y["kpt_shape"], Value::List(vec!["17".into(), "3".into()]));
        assert_eq!(
            y["names"],
            Value::Map(vec![
                ("0".into(), "person".into()),
                ("1".into(), "traffic light".into())
            ])
        );
        assert_eq!(y["alt"], Value::List(vec!["a".into(), "b c".into()]));
        assert!(matches!(y["download"], Value::Scalar(_)));
        let err = parse("names: [a, b\nx: {a: 1}\n").unwrap_err();
        assert!(err.starts_with("line 1: a list without its closing bracket"), "{err}");
        assert!(parse("  indented: 1\n").unwrap_err().contains("line 1"));
    }
}
