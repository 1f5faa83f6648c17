//! `tenure history NAME [--limit N]`.

use super::{check_global, check_name};
use crate::cli::{Global, HistoryArgs};
use crate::database;
use crate::exit::{Outcome, OK};
use crate::output::{print_json, print_table, HistoryJson};
use serde::Serialize;

#[derive(Serialize)]
struct History {
    name: String,
    events: Vec<HistoryJson>,
}

pub(super) async fn history(global: &Global, args: HistoryArgs) -> Outcome {
    check_global(global)?;
    check_name(&args.name)?;
    let store = database::connect(global).await?;
    let events: Vec<HistoryJson> = store
        .history(&args.name, args.limit)
        .await?
        .iter()
        .map(HistoryJson::from)
        .collect();
    if global.json {
        print_json(&History {
            name: args.name,
            events,
        });
        return Ok(OK);
    }
    if events.is_empty() {
        println!("{}: no history", args.name);
        return Ok(OK);
    }
    let rows: Vec<Vec<String>> = events
        .into_iter()
        .map(|e| {
            vec![
                e.at,
                e.term.to_string(),
                e.event,
                e.holder.unwrap_or_else(|| "-".into()),
                e.actor,
                e.detail,
            ]
        })
        .collect();
    print_table(&["AT", "TERM", "EVENT", "HOLDER", "ACTOR", "DETAIL"], &rows);
    Ok(OK)
}
