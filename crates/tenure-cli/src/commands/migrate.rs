//! `tenure migrate [--print]`.

use super::check_global;
use crate::cli::{Global, MigrateArgs};
use crate::database;
use crate::exit::{Outcome, OK};

pub(super) async fn migrate(global: &Global, args: MigrateArgs) -> Outcome {
    check_global(global)?;
    if args.print {
        // No connection and no side effect: the default database is an SQLite file, whose
        // directory is only created when something connects.
        let kind = match &global.database_url {
            Some(url) => tenure::BackendKind::from_url(url)?,
            None => tenure::BackendKind::Sqlite,
        };
        print!("{}", tenure::schema_script(kind, &global.table_prefix)?);
        return Ok(OK);
    }
    database::open(global, true, None).await?;
    eprintln!(
        "tenure: tables {p}lease, {p}history, {p}tick and {p}schema are ready",
        p = global.table_prefix
    );
    Ok(OK)
}
