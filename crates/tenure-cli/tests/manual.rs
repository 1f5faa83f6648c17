//! What `tenure --version`, `tenure man` and `tenure completions` print, from the real binary
//! (the Debian package installs exactly this output: scripts/build-deb.sh).

mod support;

use std::collections::BTreeSet;
use std::process::Command;
use support::{run, tenure};

/// The commands `tenure --help` lists (without clap's `help`).
fn listed_commands() -> Vec<String> {
    let out = run(tenure().arg("--help"));
    out.expect_code(0);
    out.stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A command's line; wrapped descriptions are indented further.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

#[test]
fn version_names_the_commit() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let expected = match commit {
        Some(c) => format!("tenure {} (commit {c})", env!("CARGO_PKG_VERSION")),
        None => format!("tenure {} (commit unknown)", env!("CARGO_PKG_VERSION")),
    };
    let out = run(tenure().arg("--version"));
    out.expect_code(0);
    assert_eq!(out.stdout.trim_end(), expected, "{out}");
}

#[test]
fn man_writes_one_page_per_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(tenure().args(["man", "--dir"]).arg(dir.path()));
    out.expect_code(0);
    let written: BTreeSet<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let commands = listed_commands();
    assert!(commands.len() >= 16, "{commands:?}");
    let expected: BTreeSet<String> = std::iter::once("tenure.1".to_string())
        .chain(commands.iter().map(|c| format!("tenure-{c}.1")))
        .collect();
    assert_eq!(written, expected);
    // One path per line on stdout, the pages it wrote.
    assert_eq!(out.stdout.lines().count(), expected.len(), "{out}");

    // `tenure man COMMAND` prints the same page; `tenure man` tenure(1).
    for (args, file, title) in [
        (vec!["man"], "tenure.1", ".TH tenure 1 "),
        (
            vec!["man", "every"],
            "tenure-every.1",
            ".TH tenure-every 1 ",
        ),
    ] {
        let page = run(tenure().args(&args));
        page.expect_code(0);
        let on_disk = std::fs::read_to_string(dir.path().join(file)).unwrap();
        assert_eq!(page.stdout, on_disk, "{args:?}");
        assert!(page.stdout.contains(title), "{args:?}:\n{}", page.stdout);
        assert!(page.stdout.contains(env!("CARGO_PKG_VERSION")), "{args:?}");
    }
    // The top page carries the exit codes of `--help`; a command's page its own options.
    let top = std::fs::read_to_string(dir.path().join("tenure.1")).unwrap();
    assert!(
        top.contains("leadership lost while the command ran"),
        "{top}"
    );
    let every = std::fs::read_to_string(dir.path().join("tenure-every.1")).unwrap();
    assert!(every.contains("\\-\\-catch\\-up"), "{every}");
}

#[test]
fn man_refuses_an_unknown_command() {
    let out = run(tenure().args(["man", "nosuch"]));
    out.expect_code(64);
    assert!(out.stdout.is_empty(), "{out}");
    let lines = out.message_lines();
    assert_eq!(lines.len(), 1, "{out}");
    assert!(
        lines[0].contains("\"nosuch\"") && lines[0].contains("every"),
        "{out}"
    );
    run(tenure().args(["man", "run", "--dir", "/tmp"])).expect_code(64);
}

#[test]
fn completions_cover_every_command() {
    let commands = listed_commands();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(tenure().args(["completions", shell]));
        out.expect_code(0);
        for c in &commands {
            assert!(out.stdout.contains(c.as_str()), "{shell} lacks {c}");
        }
    }
    run(tenure().args(["completions", "tcsh"])).expect_code(64);
}

/// The bash script, sourced into a real bash, completes `tenure <TAB>` and `tenure every --c`.
#[test]
fn bash_completion_completes() {
    if Command::new("bash").arg("-c").arg("true").status().is_err() {
        assert!(!support::under_ci(), "bash is required under CI");
        println!("SKIPPED: no bash");
        return;
    }
    let script = run(tenure().args(["completions", "bash"])).stdout;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), script).unwrap();
    let complete = |words: &str| -> BTreeSet<String> {
        let program = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}; \
             _tenure tenure \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.path().display()
        );
        let out = Command::new("bash")
            .arg("-c")
            .arg(program)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().to_string())
            .collect()
    };
    let top = complete("tenure ''");
    for c in ["run", "lock", "every", "status", "man", "completions"] {
        assert!(top.contains(c), "{c} not offered: {top:?}");
    }
    let every = complete("tenure every --c");
    for flag in ["--cron", "--catch-up", "--candidate"] {
        assert!(every.contains(flag), "{flag} not offered: {every:?}");
    }
}
