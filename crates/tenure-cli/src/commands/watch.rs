//! `tenure watch NAME`: one line per change until interrupted.

use super::{check_global, check_name};
use crate::cli::{Global, WatchArgs};
use crate::database;
use crate::exit::{Outcome, OK};
use crate::output::{print_json, time, LeaseJson};
use serde::Serialize;
use tokio::signal::unix::{signal, SignalKind};

#[derive(Serialize, PartialEq, Eq)]
struct Change {
    at: String,
    /// Only for a name never used (a lease carries its own name).
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(flatten)]
    lease: Option<LeaseJson>,
}

pub(super) async fn watch(global: &Global, args: WatchArgs) -> Outcome {
    check_global(global)?;
    check_name(&args.name)?;
    let store = database::connect(global).await?;
    let mut changes = store.changes();
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut last = None;
    let mut failing = false;
    loop {
        match store.get(&args.name).await {
            Ok(snapshot) => {
                failing = false;
                let first = snapshot.leases.first();
                // What makes a change worth a line: see `tenure::ChangeKey`.
                let k = Some(first.map(|l| l.change_key(snapshot.now)));
                let lease = first.map(|l| LeaseJson::new(l, snapshot.now));
                if k != last {
                    last = k;
                    let at = time(snapshot.now);
                    if global.json {
                        let name = lease.is_none().then(|| args.name.clone());
                        print_json(&Change { at, name, lease });
                    } else {
                        match &lease {
                            Some(l) => println!("{at} {}", l.line()),
                            None => println!("{at} {}: never used", args.name),
                        }
                    }
                }
            }
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "cannot read the lease; retrying");
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = interrupt.recv() => return Ok(OK),
            _ = terminate.recv() => return Ok(OK),
            () = tokio::time::sleep(args.interval) => {}
            () = changes.changed(|t| t == tenure::Topic::Lease(&args.name)) => {}
        }
    }
}
