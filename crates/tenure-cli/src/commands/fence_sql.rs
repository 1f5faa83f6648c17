//! `tenure fence-sql [--dialect D]`: the fence statement, for programs in any language.

use super::check_global;
use crate::cli::{FenceSqlArgs, Global};
use crate::exit::{Outcome, OK};
use crate::output::print_json;
use serde::Serialize;

#[derive(Serialize)]
struct FenceJson {
    dialect: String,
    table: String,
    parameters: [&'static str; 3],
    sql: String,
}

pub(super) async fn fence_sql(global: &Global, args: FenceSqlArgs) -> Outcome {
    check_global(global)?;
    // No connection: the dialect comes from the flag or from the URL's scheme.
    let kind = match (args.dialect, &global.database_url) {
        (Some(dialect), _) => dialect.kind(),
        (None, Some(url)) => tenure::BackendKind::from_url(url)?,
        (None, None) => tenure::BackendKind::Sqlite,
    };
    let sql = tenure::backend::fence_sql(kind, &global.table_prefix)?;
    let table = format!("{}lease", global.table_prefix);
    if global.json {
        print_json(&FenceJson {
            dialect: kind.to_string(),
            table,
            parameters: ["name", "holder", "term"],
            sql,
        });
    } else {
        println!(
            "-- tenure fence ({kind}, table {table}): parameters name, holder, term \
             ($TENURE_NAME, $TENURE_CANDIDATE, $TENURE_TERM); one row = still yours, a takeover \
             waits for your commit; no row = roll back"
        );
        println!("{sql};");
    }
    Ok(OK)
}
