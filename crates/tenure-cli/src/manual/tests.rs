//! The command line's shape, reviewed: every command's usage line as written below, and
//! `docs/reference/cli.md` equal to what `tenure man --markdown` prints now.

use super::markdown::{markdown, REGENERATE};
use crate::cli::Cli;
use clap::CommandFactory;
use std::path::Path;

/// Every command's usage line, as `tenure COMMAND --help` prints it. A
/// change to the command line changes one of these: update the line in the same change, so
/// that the review sees the new syntax.
const USAGE: &[(&str, &str)] = &[
    ("tenure", "tenure [OPTIONS] <COMMAND>"),
    ("run", "tenure run [OPTIONS] <NAME> -- <CMD>..."),
    ("lock", "tenure lock [OPTIONS] <NAME> -- <CMD>..."),
    (
        "every",
        "tenure every [OPTIONS] <SCHEDULE> <NAME> -- <CMD>...",
    ),
    (
        "spread",
        "tenure spread [OPTIONS] --shards <SHARDS> <GROUP> -- <CMD>...",
    ),
    ("leader", "tenure leader [OPTIONS] <NAME>"),
    ("status", "tenure status [OPTIONS]"),
    ("candidates", "tenure candidates [OPTIONS] <NAME>"),
    ("watch", "tenure watch [OPTIONS] <NAME>"),
    ("history", "tenure history [OPTIONS] <NAME>"),
    ("demote", "tenure demote [OPTIONS] <NAME>"),
    ("handover", "tenure handover [OPTIONS] <NAME> <CANDIDATE>"),
    ("pause", "tenure pause [OPTIONS] <NAME>"),
    ("resume", "tenure resume [OPTIONS] <NAME>"),
    ("migrate", "tenure migrate [OPTIONS]"),
    ("fence-sql", "tenure fence-sql [OPTIONS]"),
    ("serve", "tenure serve [OPTIONS]"),
    ("completions", "tenure completions [OPTIONS] <SHELL>"),
    ("man", "tenure man [OPTIONS] [COMMAND]"),
    ("help", "tenure help [COMMAND]"),
];

/// The usage lines clap renders now, in the order of [`USAGE`].
fn usage_lines() -> Vec<(String, String)> {
    let mut root = Cli::command();
    root.build();
    let mut lines = vec![("tenure".to_string(), usage(&mut root))];
    for sub in root.get_subcommands_mut() {
        lines.push((sub.get_name().to_string(), usage(sub)));
    }
    lines
}

fn usage(cmd: &mut clap::Command) -> String {
    let text = cmd.render_usage().to_string();
    text.strip_prefix("Usage: ").unwrap_or(&text).to_string()
}

#[test]
fn every_usage_line_is_as_reviewed() {
    Cli::command().debug_assert();
    let now = usage_lines();
    let reviewed: Vec<(String, String)> = USAGE
        .iter()
        .map(|(c, u)| (c.to_string(), u.to_string()))
        .collect();
    if now != reviewed {
        let table: String = now
            .iter()
            .map(|(c, u)| format!("    ({c:?}, {u:?}),\n"))
            .collect();
        panic!(
            "the command line changed: check the new usage lines, then make USAGE in \
             crates/tenure-cli/src/manual/tests.rs read\n{table}"
        );
    }
}

#[test]
fn the_reference_page_is_current() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    if !docs.is_dir() && std::env::var("CI").as_deref() != Ok("true") {
        // A packaged crate (cargo package, a registry) has no docs/ to compare with.
        println!("SKIPPED: no {} next to this crate", docs.display());
        return;
    }
    let path = docs.join("reference/cli.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let now = markdown();
    if committed != now {
        let line = committed
            .lines()
            .zip(now.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(now.lines().count()));
        panic!(
            "docs/reference/cli.md is stale (first difference at line {}): regenerate it with\n  \
             {REGENERATE}",
            line + 1
        );
    }
}

#[test]
fn the_reference_page_shows_every_visible_command() {
    let page = markdown();
    let mut root = Cli::command();
    root.build();
    for sub in root.get_subcommands() {
        let heading = format!("\n## tenure {}\n", sub.get_name());
        let shown = page.contains(&heading);
        let expected = !sub.is_hide_set() && sub.get_name() != "help";
        assert_eq!(shown, expected, "{heading:?} in docs/reference/cli.md");
    }
    // What `--help` prints, not a summary: the exit codes of the top-level help are there.
    assert!(page.contains("75   leadership lost"), "{page}");
}
