//! `tenure status`: every name, every spreading group's assignment, and (with the `etcd`
//! feature, where its tables have been used) the etcd on the database.

use super::check_global;
use crate::cli::Global;
use crate::database;
use crate::exit::{Outcome, OK};
use crate::groups::GroupJson;
use crate::output::{human_duration, print_json, print_table, time, LeaseJson};
use crate::roster::{live_counts, LiveCount};
use serde::Serialize;
use std::time::Duration;
use tenure::candidates::Candidates;

#[derive(Serialize)]
struct Status {
    now: String,
    leases: Vec<NameJson>,
    /// Only when a group has live members.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    groups: Vec<GroupJson>,
    /// Only where the etcd tables exist and were used.
    #[cfg(feature = "etcd")]
    #[serde(skip_serializing_if = "Option::is_none")]
    etcd: Option<crate::etcd_view::EtcdJson>,
}

fn list(shards: &[u32]) -> String {
    let shown: Vec<String> = shards.iter().map(u32::to_string).collect();
    if shown.is_empty() {
        "-".into()
    } else {
        shown.join(",")
    }
}

fn print_groups(groups: &[GroupJson]) {
    let mut rows = Vec::new();
    for g in groups {
        let row = |who: String, owns: String, which: String| {
            vec![g.group.clone(), g.shards.to_string(), who, owns, which]
        };
        for (m, s) in &g.members {
            let who = match g.member_shards.as_ref().and_then(|n| n.get(m)) {
                Some(n) => format!("{m} (N={n})"),
                None => m.clone(),
            };
            rows.push(row(who, s.len().to_string(), list(s)));
        }
        if g.unowned.count > 0 {
            let (n, which) = (g.unowned.count.to_string(), g.unowned.text());
            rows.push(row("(unowned)".into(), n, which));
        }
        if g.paused {
            rows.push(row("(group paused)".into(), "-".into(), "-".into()));
        }
        if let Some(p) = &g.paused_shards {
            rows.push(row("(paused)".into(), p.count.to_string(), p.text()));
        }
    }
    println!();
    print_table(&["GROUP", "SHARDS", "MEMBER", "OWNS", "WHICH"], &rows);
}

/// A name's lease and how many live candidates and observers it has.
#[derive(Serialize)]
struct NameJson {
    #[serde(flatten)]
    lease: LeaseJson,
    live: LiveCount,
}

pub(super) async fn status(global: &Global) -> Outcome {
    check_global(global)?;
    let store = database::connect(global).await?;
    let snapshot = store.list().await?;
    let counts = live_counts(&Candidates::new(store.clone()).live().await?);
    let leases: Vec<NameJson> = snapshot
        .leases
        .iter()
        .map(|l| NameJson {
            lease: LeaseJson::new(l, snapshot.now),
            live: counts.get(&l.name).copied().unwrap_or_default(),
        })
        .collect();
    let groups = crate::groups::read(&store).await?;
    #[cfg(feature = "etcd")]
    let etcd = crate::etcd_view::section(&store).await?;
    if global.json {
        print_json(&Status {
            now: time(snapshot.now),
            leases,
            groups,
            #[cfg(feature = "etcd")]
            etcd,
        });
        return Ok(OK);
    }
    print_names(&leases);
    if !groups.is_empty() {
        print_groups(&groups);
    }
    #[cfg(feature = "etcd")]
    if let Some(etcd) = &etcd {
        crate::etcd_view::print(etcd);
    }
    Ok(OK)
}

fn print_names(leases: &[NameJson]) {
    if leases.is_empty() {
        println!("no names yet");
        return;
    }
    let rows: Vec<Vec<String>> = leases
        .iter()
        .map(|NameJson { lease: l, live }| {
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
                match live.observers {
                    0 => live.candidates.to_string(),
                    n => format!("{} (+{n} observing)", live.candidates),
                },
            ]
        })
        .collect();
    print_table(
        &[
            "NAME",
            "HOLDER",
            "TERM",
            "SINCE",
            "LEFT",
            "PAUSED",
            "HANDOVER",
            "CANDIDATES",
        ],
        &rows,
    );
}
