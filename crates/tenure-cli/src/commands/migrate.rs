//! `tenure migrate [--print]`.

use super::check_global;
use crate::cli::{Global, MigrateArgs};
use crate::database;
use crate::exit::{Outcome, OK};

pub async fn migrate(global: &Global, args: MigrateArgs) -> Outcome {
    check_global(global)?;
    let url = database::url(global)?;
    if args.print {
        let kind = tenure::BackendKind::from_url(&url)?;
        print!(
            "{}",
            tenure::backend::schema_script(kind, &global.table_prefix)?
        );
        return Ok(OK);
    }
    database::open(global, true, None).await?;
    eprintln!(
        "tenure: tables {p}lease, {p}history and {p}schema are ready",
        p = global.table_prefix
    );
    Ok(OK)
}
