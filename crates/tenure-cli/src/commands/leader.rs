//! `tenure leader NAME [--am-i ID]`.

use super::{check_global, check_name};
use crate::cli::{Global, LeaderArgs};
use crate::database;
use crate::exit::{Outcome, NOT_LEADER, OK};
use crate::output::{print_json, LeaderJson, LeaseJson};
use serde::Serialize;

#[derive(Serialize)]
struct Answer {
    name: String,
    leader: Option<LeaderJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    am_i: Option<AmI>,
}

#[derive(Serialize)]
struct AmI {
    candidate: String,
    leads: bool,
}

pub(super) async fn leader(global: &Global, args: LeaderArgs) -> Outcome {
    check_global(global)?;
    check_name(&args.name)?;
    if let Some(id) = &args.am_i {
        tenure::validate::candidate(id)?;
    }
    let store = database::connect(global).await?;
    let snapshot = store.get(&args.name).await?;
    let lease = snapshot.leases.first();
    let info = lease.and_then(|l| tenure::LeaderInfo::from_lease(l, snapshot.now));
    let am_i = args.am_i.map(|candidate| AmI {
        leads: info.as_ref().is_some_and(|l| l.holder == candidate),
        candidate,
    });
    let code = match &am_i {
        Some(a) if !a.leads => NOT_LEADER,
        _ => OK,
    };
    if global.json {
        print_json(&Answer {
            name: args.name,
            leader: info.as_ref().map(LeaderJson::from),
            am_i,
        });
    } else {
        match (lease, &am_i) {
            (_, Some(a)) if a.leads => println!("{} leads {}", a.candidate, args.name),
            (_, Some(a)) => println!("{} does not lead {}", a.candidate, args.name),
            (Some(lease), None) => println!("{}", LeaseJson::new(lease, snapshot.now).line()),
            (None, None) => println!("{}: no leader (never used)", args.name),
        }
    }
    Ok(code)
}
