//! `tenure fence-sql [--dialect D] [--etcd]`: the fence statement, for programs in any language:
//! of tenure's leases, or (`--etcd`) of etcd locks taken through `tenure serve`'s etcd API.

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

#[cfg(feature = "etcd")]
#[derive(Serialize)]
struct EtcdFenceJson {
    dialect: String,
    table: String,
    parameters: [&'static str; 2],
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
    #[cfg(feature = "etcd")]
    if args.etcd {
        return etcd_fence_sql(global, kind);
    }
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

#[cfg(feature = "etcd")]
fn etcd_fence_sql(global: &Global, kind: tenure::BackendKind) -> Outcome {
    let sql = tenure::etcd::fence_sql(kind, &global.table_prefix)?;
    let table = format!("{}etcd_kv", global.table_prefix);
    if global.json {
        print_json(&EtcdFenceJson {
            dialect: kind.to_string(),
            table,
            parameters: ["key", "revision"],
            sql,
        });
    } else {
        println!(
            "-- tenure fence for etcd locks ({kind}, table {table}): parameters the lock's key \
             (bytes) and a revision at which it was held ($ETCD_LOCK_KEY, $ETCD_LOCK_REV); one \
             row = still yours, an unlock or expiry waits for your commit; no row = roll back"
        );
        println!("{sql};");
    }
    Ok(OK)
}
