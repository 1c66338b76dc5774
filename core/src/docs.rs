//! Generated sections of the docs: text between
//! `<!-- BEGIN GENERATED: NAME -->` and `<!-- END GENERATED: NAME -->`
//! lines is written by code (the op table from the op schema, the CLI
//! reference from clap), and a test per section fails when the page
//! differs from what the code generates now (`STOKER_BLESS=1` rewrites
//! it).

use std::path::Path;

/// Checks that the section `name` of the page at `path` is `content`.
/// With `STOKER_BLESS=1` in the environment it rewrites the section
/// instead. The error says what differs and how to regenerate.
pub fn check_generated(path: &Path, name: &str, content: &str) -> Result<(), String> {
    let bless = std::env::var_os("STOKER_BLESS").is_some_and(|v| v == "1");
    check_or_bless(path, name, content, bless)
}

fn check_or_bless(path: &Path, name: &str, content: &str, bless: bool) -> Result<(), String> {
    let page = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let begin = format!("<!-- BEGIN GENERATED: {name} -->\n");
    let end = format!("<!-- END GENERATED: {name} -->");
    let start = page
        .find(&begin)
        .map(|i| i + begin.len())
        .ok_or_else(|| format!("{}: no line {begin:?}", path.display()))?;
    let stop = page[start..]
        .find(&end)
        .map(|i| start + i)
        .ok_or_else(|| format!("{}: no line {end:?} after the begin line", path.display()))?;
    if page[start..stop] == *content {
        return Ok(());
    }
    if bless {
        let updated = format!("{}{content}{}", &page[..start], &page[stop..]);
        return std::fs::write(path, updated).map_err(|e| format!("{}: {e}", path.display()));
    }
    let first = page[start..stop]
        .lines()
        .zip(content.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| page[start..stop].lines().count().min(content.lines().count()));
    Err(format!(
        "{}: the generated section {name:?} is out of date (first difference at its line {}); \
         run the test again with STOKER_BLESS=1 to rewrite it",
        path.display(),
        first + 1
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_is_checked_and_blessed_only_on_request() {
        let dir = std::env::temp_dir().join(format!("stoker-docs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let page = dir.join("page.md");
        std::fs::write(
            &page,
            "intro\n<!-- BEGIN GENERATED: t -->\nold\n<!-- END GENERATED: t -->\nafter\n",
        )
        .unwrap();
        let err = check_or_bless(&page, "t", "new\n", false).unwrap_err();
        assert!(err.contains("out of date") && err.contains("STOKER_BLESS"), "{err}");
        assert!(check_or_bless(&page, "t", "old\n", false).is_ok());
        assert!(
            check_or_bless(&page, "other", "x", false)
                .unwrap_err()
                .contains("no line")
        );
        // Blessing rewrites only the section.
        check_or_bless(&page, "t", "new\n", true).unwrap();
        let text = std::fs::read_to_string(&page).unwrap();
        assert_eq!(
            text,
            "intro\n<!-- BEGIN GENERATED: t -->\nnew\n<!-- END GENERATED: t -->\nafter\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
