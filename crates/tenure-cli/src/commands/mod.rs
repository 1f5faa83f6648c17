//! One file per command. Every command validates its input before it connects, so a bad
//! input changes nothing.

mod admin;
mod candidates;
mod every;
mod fence_sql;
mod group_admin;
mod history;
mod leader;
mod lock;
mod migrate;
mod run;
mod serve;
mod spread;
mod status;
mod watch;

use crate::cli::{Cli, Command, LeaseArgs, StandingArgs};
use crate::exit::{Failure, Outcome};
use tenure::{ElectorBuilder, Timing};

pub(crate) async fn dispatch(cli: Cli) -> Outcome {
    let global = &cli.global;
    match cli.command {
        Command::Run(args) => run::run(global, args).await,
        Command::Lock(args) => lock::lock(global, args).await,
        Command::Every(args) => every::every(global, args).await,
        Command::Spread(args) => spread::spread(global, args).await,
        Command::Leader(args) => leader::leader(global, args).await,
        Command::Status => status::status(global).await,
        Command::Candidates(args) => candidates::candidates(global, args).await,
        Command::Watch(args) => watch::watch(global, args).await,
        Command::History(args) => history::history(global, args).await,
        Command::Demote(args) => admin::demote(global, args).await,
        Command::Handover(args) => admin::handover(global, args).await,
        Command::Pause(args) => admin::pause(global, args).await,
        Command::Resume(args) => admin::resume(global, args).await,
        Command::Migrate(args) => migrate::migrate(global, args).await,
        Command::FenceSql(args) => fence_sql::fence_sql(global, args).await,
        Command::Serve(args) => serve::serve(global, args).await,
        Command::Completions(args) => crate::manual::completions(args),
        Command::Man(args) => crate::manual::man(args),
    }
}

/// `TENURE_FENCE_SQL`: the store's fence statement, for the command to fence its writes with
/// `TENURE_NAME`, `TENURE_CANDIDATE` and `TENURE_TERM` (see `tenure fence-sql`).
fn fence_env(store: &tenure::Store) -> Vec<(&'static str, String)> {
    store
        .fence_sql()
        .map(|sql| ("TENURE_FENCE_SQL", sql.to_string()))
        .into_iter()
        .collect()
}

/// Checks a name before anything connects.
fn check_name(name: &str) -> Result<(), Failure> {
    Ok(tenure::validate::name(name)?)
}

/// Checks `--candidate` (if given) and builds the timing of `--ttl`, before anything connects.
fn check_lease(lease: &LeaseArgs) -> Result<Timing, Failure> {
    if let Some(id) = &lease.candidate {
        tenure::validate::candidate(id)?;
    }
    Ok(Timing::from_ttl(lease.ttl)?)
}

/// The candidate's standing among the candidates of its name: `--priority` and `--settle`.
fn stand(builder: ElectorBuilder, standing: &StandingArgs) -> ElectorBuilder {
    let builder = builder.priority(standing.priority);
    match standing.settle {
        Some(settle) => builder.settle(settle),
        None => builder,
    }
}

/// Checks the global options before anything connects.
fn check_global(global: &crate::cli::Global) -> Result<(), Failure> {
    tenure::validate::table_prefix(&global.table_prefix)?;
    if let Some(url) = &global.database_url {
        if url.trim().is_empty() {
            return Err(Failure::usage(format!(
                "invalid database URL {url:?} (from --database-url or TENURE_DATABASE_URL): it is \
                 empty; give postgres://…, mysql://…, mariadb://… or sqlite://PATH, or unset it \
                 for the default SQLite file"
            )));
        }
        tenure::BackendKind::check_url(url)?;
    }
    Ok(())
}
