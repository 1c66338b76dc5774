//! docs/cli.md's command reference, generated from the clap definitions
//! (so that a flag's docs cannot drift from the flag): one section per
//! command with its about text and a table of its arguments. A unit test
//! compares the page's generated section with this and fails on drift
//! (`STOKER_BLESS=1` rewrites it).

use std::fmt::Write as _;

use clap::Command;

/// The reference for every visible subcommand of `cli`.
pub fn markdown(cli: &Command) -> String {
    let mut out = String::new();
    let mut cli = cli.clone();
    cli.build();
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        let _ = writeln!(out, "### `stoker {}`\n", sub.get_name());
        if let Some(about) = sub.get_long_about().or(sub.get_about()) {
            let _ = writeln!(out, "{}\n", one_paragraph(&about.to_string()));
        }
        let args: Vec<_> = sub
            .get_arguments()
            .filter(|a| !a.is_hide_set() && a.get_id() != "help")
            .collect();
        if args.is_empty() {
            continue;
        }
        out.push_str("| argument | default | what it does |\n| --- | --- | --- |\n");
        for arg in args {
            let value = arg
                .get_value_names()
                .map(|names| names.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" "))
                .unwrap_or_else(|| arg.get_id().to_string().to_uppercase());
            let takes_value = arg.get_action().takes_values();
            let name = match arg.get_long() {
                Some(long) if takes_value => format!("`--{long} {value}`"),
                Some(long) => format!("`--{long}`"),
                None => format!("`{value}`"),
            };
            let default: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let default = if default.is_empty() {
                String::new()
            } else {
                format!("`{}`", default.join(" "))
            };
            let mut help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            if let Some(env) = arg.get_env() {
                let _ = write!(help, " (env `{}`)", env.to_string_lossy());
            }
            let _ = writeln!(out, "| {name} | {default} | {} |", cell(&help));
        }
        out.push('\n');
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

fn one_paragraph(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Help text as one table cell: paragraphs joined with `<br>`, pipes
/// escaped.
fn cell(text: &str) -> String {
    text.split("\n\n")
        .map(|p| {
            p.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(if p.lines().any(|l| l.starts_with("  ")) {
                    "<br>"
                } else {
                    " "
                })
        })
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("<br>")
        .replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_docs_cli_reference_is_generated_from_clap() {
        let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md");
        let text = super::markdown(&crate::Cli::command());
        assert!(
            text.contains("### `stoker worker`") && text.contains("`--transform TRANSFORM`"),
            "{text}"
        );
        if let Err(e) = stoker_core::docs::check_generated(&page, "cli reference", &text) {
            panic!("{e}");
        }
    }
}
