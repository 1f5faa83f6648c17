//! One file per command. Every command validates its input before it connects, so a bad
//! input changes nothing.

mod admin;
mod history;
mod leader;
mod migrate;
mod run;
mod status;
mod watch;

use crate::cli::{Cli, Command};
use crate::exit::{Failure, Outcome};

pub async fn dispatch(cli: Cli) -> Outcome {
    let global = &cli.global;
    match cli.command {
        Command::Run(args) => run::run(global, args).await,
        Command::Leader(args) => leader::leader(global, args).await,
        Command::Status => status::status(global).await,
        Command::Watch(args) => watch::watch(global, args).await,
        Command::History(args) => history::history(global, args).await,
        Command::Demote(args) => admin::demote(global, args).await,
        Command::Handover(args) => admin::handover(global, args).await,
        Command::Pause(args) => admin::pause(global, args).await,
        Command::Resume(args) => admin::resume(global, args).await,
        Command::Migrate(args) => migrate::migrate(global, args).await,
    }
}

/// Checks a name before anything connects.
fn check_name(name: &str) -> Result<(), Failure> {
    Ok(tenure::validate::name(name)?)
}

/// Checks the global options before anything connects.
fn check_global(global: &crate::cli::Global) -> Result<(), Failure> {
    tenure::validate::table_prefix(&global.table_prefix)?;
    if let Some(url) = &global.database_url {
        tenure::BackendKind::from_url(url)?;
    }
    Ok(())
}
