//! `docs/reference/cli.md`: every command's `--help`, verbatim, as one Markdown page.

use super::documented;
use clap::Command;
use std::fmt::Write;

/// The command that regenerates `docs/reference/cli.md` (named in the page and by the test
/// that finds it stale).
pub(super) const REGENERATE: &str =
    "cargo run -q -p tenure-cli -- man --markdown > docs/reference/cli.md";

/// The page: a contents list, then one section per command (hidden ones and `help` left out)
/// holding exactly what `tenure COMMAND --help` prints.
pub(super) fn markdown() -> String {
    let mut root = documented();
    root.build();
    let mut out = String::new();
    out.push_str("# The `tenure` command line\n\n");
    let _ = writeln!(
        out,
        "Every command's `--help`, generated from its definition (`crates/tenure-cli/src/cli.rs`) \
         by `{REGENERATE}`. Do not edit it by hand: a test fails when it differs from that \
         output.\n"
    );
    let mut sections: Vec<(String, String)> = vec![("tenure".into(), help(&mut root))];
    for sub in root.get_subcommands_mut() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        sections.push((format!("tenure {}", sub.get_name()), help(sub)));
    }
    for (title, _) in &sections {
        let _ = writeln!(out, "- [`{title}`](#{})", title.replace(' ', "-"));
    }
    for (title, text) in &sections {
        let _ = write!(out, "\n## {title}\n\n```text\n{}\n```\n", text.trim_end());
    }
    out
}

/// What `--help` prints, without styling and with no trailing spaces (clap pads some lines).
fn help(cmd: &mut Command) -> String {
    cmd.render_long_help()
        .to_string()
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}
