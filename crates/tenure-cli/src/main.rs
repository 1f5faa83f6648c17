//! `tenure`: leadership for any program, and the operator's view of it.
//!
//! # Layout
//! - `cli`: the command line (clap), with the exit-code table in `--help`.
//! - `exit`: exit codes and the one-line failures that carry them.
//! - `database`: which database (default: an SQLite file in the state directory), connecting.
//! - `output`: human and JSON renderings.
//! - `commands/`: one file per command.
//! - `sd_notify`: readiness and status for systemd (`NOTIFY_SOCKET`).
//! - `health`: the health check that leadership follows (`--health-cmd`).
//! - `manual`: man pages, shell completions and the Markdown reference, generated from `cli`.
//! - `lead`: running a command while a tenure is held; `supervise`: its keeper, init and
//!   PID namespace, so that nothing it starts outlives the tenure.

mod cli;
mod commands;
mod database;
#[cfg(feature = "etcd")]
mod etcd_view;
mod exit;
mod groups;
mod health;
mod lead;
mod logging;
mod manual;
mod output;
mod roster;
mod sd_notify;
mod serve;
mod stages;
mod supervise;
mod watching;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // `tenure __keep` / `tenure __init`: the supervision processes of `tenure run`, before any
    // runtime or thread exists.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(code) = supervise::internal(&argv) {
        return ExitCode::from(code);
    }
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    let tracing = logging::init(&cli.global);
    let code = run(cli);
    // After the runtime is gone: the last spans (a short command's all) are exported now.
    tracing.shutdown();
    ExitCode::from(code)
}

/// Runs the command on its runtime; returns its exit code.
fn run(cli: cli::Cli) -> u8 {
    // One thread: the supervised child's parent-death signal is tied to the thread that forked
    // it, and this thread lives as long as tenure does.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tenure: cannot start the runtime: {e}");
            return exit::INTERNAL;
        }
    };
    let ended = runtime.block_on(async {
        let ended = commands::dispatch(cli).await;
        database::close_all().await;
        ended
    });
    match ended {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("tenure: {failure}");
            failure.code
        }
    }
}
