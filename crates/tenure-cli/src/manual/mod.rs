//! The manual, generated from the clap definitions so that `--help`, the man pages, the shell
//! completions and `docs/reference/cli.md` cannot drift apart: `tenure man`, `tenure
//! completions` and `tenure man --markdown`. The Debian package runs the first two when it is
//! built (scripts/build-deb.sh); nothing they print is committed except
//! `docs/reference/cli.md`, which a test keeps equal to `tenure man --markdown`.

mod markdown;
#[cfg(test)]
mod tests;

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use crate::exit::{Failure, Outcome, OK};
use clap::{Command, CommandFactory};
use std::io::Write;

use markdown::markdown;

/// The width help is wrapped at in the generated documents (clap's default without a terminal).
const DOC_WIDTH: usize = 100;

/// The command line as the generated documents show it: wrapped at [`DOC_WIDTH`] whatever the
/// terminal, and without the current value of any environment variable, so that a document
/// does not depend on the machine or the shell that generated it.
fn documented() -> Command {
    fn fix(cmd: Command) -> Command {
        cmd.mut_args(|arg| arg.hide_env_values(true))
            .mut_subcommands(fix)
    }
    fix(Cli::command()).term_width(DOC_WIDTH)
}

/// `tenure completions SHELL`: the completion script on stdout.
pub(crate) fn completions(args: CompletionsArgs) -> Outcome {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "tenure", &mut script);
    print(&script)
}

/// `tenure man [COMMAND]`: one page (roff) on stdout; `tenure man --dir DIR`: every page,
/// `tenure.1` and `tenure-COMMAND.1` for each visible command, written into DIR; `tenure man
/// --markdown`: the Markdown reference on stdout.
pub(crate) fn man(args: ManArgs) -> Outcome {
    if args.markdown {
        return print(markdown().as_bytes());
    }
    // As clap_mangen's own generate_to: no page for the `help` pseudo-command.
    let mut root = documented().disable_help_subcommand(true);
    root.build();
    let visible: Vec<&Command> = root
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .collect();
    if let Some(dir) = args.dir {
        std::fs::create_dir_all(&dir).map_err(|e| written(&dir, e))?;
        for cmd in std::iter::once(&root).chain(visible) {
            let page = page(cmd);
            let path = page.generate_to(&dir).map_err(|e| written(&dir, e))?;
            println!("{}", path.display());
        }
        return Ok(OK);
    }
    let cmd = match args.command.as_deref() {
        None => &root,
        Some(name) => visible
            .iter()
            .copied()
            .find(|c| c.get_name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = visible.iter().map(|c| c.get_name()).collect();
                Failure::usage(format!(
                    "no manual page for {name:?}: give one of {}, or nothing for tenure(1)",
                    names.join(", ")
                ))
            })?,
    };
    let mut roff = Vec::new();
    page(cmd).render(&mut roff)?;
    print(&roff)
}

/// One manual page, its footer naming the version it documents.
fn page(cmd: &Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd.clone())
        .source(format!("tenure {}", env!("TENURE_VERSION")))
        .manual("tenure manual")
}

fn written(dir: &std::path::Path, e: std::io::Error) -> Failure {
    Failure::usage(format!(
        "cannot write manual pages into {}: {e}",
        dir.display()
    ))
}

/// Writes a generated document to stdout, a closed pipe (`| head`) included as a failure
/// rather than a panic.
fn print(bytes: &[u8]) -> Outcome {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()?;
    Ok(OK)
}
