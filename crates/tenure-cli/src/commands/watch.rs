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

/// What makes a change worth a line: who leads (or that nobody does), the term, pause and
/// handover, the leader's metadata (e.g. a new address), and while nobody leads, until when
/// nobody may start (`demote --now` cuts that short). Not the countdown of the time left, nor
/// the expiry a renewal pushes on.
#[derive(PartialEq, Eq)]
struct Key {
    holder: Option<String>,
    term: u64,
    paused: bool,
    handover_to: Option<String>,
    metadata: Option<String>,
    vacant_until: Option<String>,
}

fn key(lease: &Option<LeaseJson>) -> Option<Key> {
    lease.as_ref().map(|l| Key {
        holder: l.holder.clone(),
        term: l.term,
        paused: l.paused,
        handover_to: l.handover_to.clone(),
        metadata: l.metadata.clone(),
        vacant_until: l.holder.is_none().then(|| l.expires_at.clone()),
    })
}

pub async fn watch(global: &Global, args: WatchArgs) -> Outcome {
    check_global(global)?;
    check_name(&args.name)?;
    let store = database::connect(global).await?;
    let mut notifications = store.backend().subscribe();
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut last = None;
    let mut failing = false;
    loop {
        match store.get(&args.name).await {
            Ok(snapshot) => {
                failing = false;
                let lease = snapshot
                    .leases
                    .first()
                    .map(|l| LeaseJson::new(l, snapshot.now));
                let k = Some(key(&lease));
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
        let wake = async {
            match &mut notifications {
                Some(rx) => loop {
                    match rx.recv().await {
                        Ok(changed) if changed == args.name => break,
                        Ok(_) => {}
                        Err(_) => break,
                    }
                },
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = interrupt.recv() => return Ok(OK),
            _ = terminate.recv() => return Ok(OK),
            () = tokio::time::sleep(args.interval) => {}
            () = wake => {}
        }
    }
}
