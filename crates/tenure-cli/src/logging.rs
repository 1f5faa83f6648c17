//! Logs on stderr through tracing: human by default, JSON with `--log-format json`.

use crate::cli::{Global, LogFormat};
use tracing_subscriber::EnvFilter;

pub(crate) fn init(global: &Global) {
    let level = match (global.verbose, global.quiet) {
        (0, 0) => "info",
        (1, _) => "debug",
        (v, _) if v >= 2 => "trace",
        (_, 1) => "warn",
        _ => "error",
    };
    // The library speaks for itself; sqlx's per-statement logs only at trace.
    let default = format!("tenure={level},tenure_cli={level},sqlx=warn");
    let filter = EnvFilter::try_from_env("TENURE_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match global.log_format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
