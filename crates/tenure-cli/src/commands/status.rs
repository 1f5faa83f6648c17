//! `tenure status`: every name.

use super::check_global;
use crate::cli::Global;
use crate::database;
use crate::exit::{Outcome, OK};
use crate::output::{human_duration, print_json, print_table, time, LeaseJson};
use serde::Serialize;
use std::time::Duration;

#[derive(Serialize)]
struct Status {
    now: String,
    leases: Vec<LeaseJson>,
}

pub async fn status(global: &Global) -> Outcome {
    check_global(global)?;
    let store = database::connect(global).await?;
    let snapshot = store.list().await?;
    let leases: Vec<LeaseJson> = snapshot
        .leases
        .iter()
        .map(|l| LeaseJson::new(l, snapshot.now))
        .collect();
    if global.json {
        print_json(&Status {
            now: time(snapshot.now),
            leases,
        });
        return Ok(OK);
    }
    if leases.is_empty() {
        println!("no names yet");
        return Ok(OK);
    }
    let rows: Vec<Vec<String>> = leases
        .iter()
        .map(|l| {
            vec![
                l.name.clone(),
                l.holder.clone().unwrap_or_else(|| "-".into()),
                l.term.to_string(),
                l.since.clone(),
                if l.holder.is_some() {
                    human_duration(Duration::from_millis(l.remaining_ms))
                } else {
                    "-".into()
                },
                if l.paused { "yes" } else { "no" }.into(),
                l.handover_to.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    print_table(
        &[
            "NAME", "HOLDER", "TERM", "SINCE", "LEFT", "PAUSED", "HANDOVER",
        ],
        &rows,
    );
    Ok(OK)
}
