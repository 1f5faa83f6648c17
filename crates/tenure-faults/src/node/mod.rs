//! A node: one elector on the library, and while it leads, two loops of protected operations
//! (the fenced register and the unfenced negative control), every step recorded in its history.
//! Or, in the lock workload ([`locks`]), one `Locks` with several tasks doing the same under
//! lock guards; in the spreading workload ([`spread`]), one member of a group doing the same
//! under each shard it owns.
//!
//! The node uses the library the way an application would: it waits for a [`LeaderGuard`],
//! checks [`LeaderGuard::is_lost`] before each operation, "works" for a while, then writes.
//! The fenced register is written inside a transaction that calls `fence` with the guard's
//! term; the negative control is written on the belief alone. A pause during the work turns
//! both into stale writes: the fence must refuse one, the checker must catch the other.

mod capture;
pub mod locks;
pub mod spread;

use crate::clock;
use crate::event::{EventLog, Kind, Resource};
use crate::resource::Db;
use crate::scenario::Workload;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tenure::{Elector, LeaderGuard, Timing};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

/// The "work" of each operation of the runner's nodes, between the check of the guard and the
/// write: the window a pause lands in (`runner::nemesis`).
pub const WORK: Duration = Duration::from_millis(200);

/// What a node needs to know.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub url: String,
    pub name: String,
    /// The node's name in the history (`n1.2`: slot 1, second incarnation).
    pub id: String,
    /// The candidate (or lock holder) id it campaigns with: its own `id`, unless the scenario
    /// gives several nodes one id.
    pub candidate: String,
    pub workload: Workload,
    /// The lock workload's locks and permits (ignored by the elector).
    pub locks: locks::LockSet,
    pub events: PathBuf,
    pub ttl: Duration,
    pub table: String,
    /// The "work" of each operation between its check of the guard and its write.
    pub work: Duration,
    /// If this file appears, the next fenced write stops this process (SIGSTOP) inside its
    /// transaction, after the fence check (the SQLite fault); the file is removed first.
    pub stop_file: Option<PathBuf>,
    /// The elector's priority among the candidates (higher preferred).
    pub priority: i32,
    /// Mint terms in the database's epochs; `false` only in a negative control
    /// ([`tenure::StoreOptions::without_epochs`]).
    pub epochs: bool,
}

/// Runs a node until SIGTERM or SIGINT; then shuts the elector down (releasing) and returns.
pub async fn run(config: NodeConfig) -> Result<(), String> {
    let log = Arc::new(EventLog::create(&config.events, &config.id).map_err(|e| e.to_string())?);
    // Not `.init()`: it would also route the `log` crate through these per-layer filters, and
    // an answered `log_enabled!` (sqlx asks one before it logs a failed statement) leaves the
    // filters' per-thread state set, so that the next event of that thread (the elector's
    // `campaign failed`) was dropped by both layers.
    let subscriber = tracing_subscriber::registry()
        .with(capture::Campaigns(log.clone()).with_filter(
            tracing_subscriber::filter::Targets::new().with_target("tenure", tracing::Level::DEBUG),
        ))
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
        );
    tracing::subscriber::set_global_default(subscriber).map_err(|e| e.to_string())?;
    log.record(Kind::Start {
        pid: std::process::id(),
    });
    let timing = Timing::from_ttl(config.ttl).map_err(|e| e.to_string())?;
    let (db, store) = Db::connect(&config.url, timing.db_timeout(), config.epochs)
        .await
        .map_err(|e| e.to_string())?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    if config.workload.is_etcd() {
        return Err("an etcd workload is `etcdctl lock` clients, not a node's".into());
    }
    let config = Arc::new(config);
    if config.workload != Workload::Elector {
        let set = config.locks.clone();
        let work = async {
            if config.workload == Workload::Spread {
                spread::run(config.clone(), set, db, store, log).await
            } else {
                locks::run(config.clone(), set, db, store, log).await
            }
        };
        return tokio::select! {
            ended = work => ended,
            _ = term.recv() => Ok(()),
            _ = tokio::signal::ctrl_c() => Ok(()),
        };
    }
    let elector = Elector::builder(store, &config.name)
        .candidate(&config.candidate)
        .priority(config.priority)
        .timing(timing)
        .spawn()
        .map_err(|e| e.to_string())?;
    let leading = async {
        while let Ok(guard) = elector.wait_until_leader().await {
            lead(guard, &db, &log, &config).await;
        }
    };
    tokio::select! {
        () = leading => {}
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    elector.shutdown().await;
    Ok(())
}

/// Records each renewal of `guard`'s tenure (a new deadline for its term) until it is lost.
/// The role watch does not wake its receivers on a renewal (only on a change of role or
/// term), so the guard's deadline is read every 10 ms; the event may come up to that late,
/// with the deadline the renewal set.
async fn record_renewals(guard: LeaderGuard, log: Arc<EventLog>) {
    let term = guard.term();
    let mut last = guard.deadline();
    loop {
        tokio::select! {
            () = guard.lost() => return,
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
        let deadline = guard.deadline();
        if deadline > last && !guard.is_lost() {
            log.record(Kind::Renewed {
                term,
                deadline: clock::instant_ns(deadline),
            });
            last = deadline;
        }
    }
}

/// One tenure: both loops run until the guard is lost; the tenure's end is recorded when the
/// guard's signal fires.
async fn lead(guard: LeaderGuard, db: &Db, log: &Arc<EventLog>, config: &Arc<NodeConfig>) {
    let term = guard.term();
    log.record(Kind::Gained {
        term,
        deadline: clock::instant_ns(guard.deadline()),
        holder: (config.candidate != config.id).then(|| config.candidate.clone()),
    });
    let renewals = tokio::spawn(record_renewals(guard.clone(), log.clone()));
    let seq = Arc::new(AtomicU64::new(0));
    let fenced = tokio::spawn(operate(
        guard.clone(),
        Resource::Fenced,
        db.clone(),
        log.clone(),
        config.clone(),
        seq.clone(),
    ));
    let control = tokio::spawn(operate(
        guard.clone(),
        Resource::Unfenced,
        db.clone(),
        log.clone(),
        config.clone(),
        seq,
    ));
    guard.lost().await;
    log.record(Kind::SteppedDown { term });
    drop(guard);
    // Each loop notices at its next check; neither is cancelled (the control must stay naive).
    let _ = tokio::join!(fenced, control, renewals);
}

/// A loop of protected operations on one resource while `guard` holds.
async fn operate(
    guard: LeaderGuard,
    resource: Resource,
    db: Db,
    log: Arc<EventLog>,
    config: Arc<NodeConfig>,
    seq: Arc<AtomicU64>,
) {
    let term = guard.term();
    let bound = config.ttl * 2;
    loop {
        if guard.is_lost() {
            return;
        }
        let seq = seq.fetch_add(1, Ordering::SeqCst) + 1;
        log.record(Kind::OpIssued {
            resource,
            term,
            seq,
            deadline: clock::instant_ns(guard.deadline()),
        });
        // The "work" between the check and the write: where a pause hurts.
        tokio::time::sleep(config.work).await;
        let stop = config
            .stop_file
            .as_ref()
            .filter(|f| resource == Resource::Fenced && std::fs::remove_file(f).is_ok());
        let inside = || {
            if stop.is_some() {
                log.record(Kind::FaultStart {
                    fault: "stopped_in_transaction".into(),
                    target: config.id.clone(),
                });
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
            }
        };
        let lease = (config.name.as_str(), config.candidate.as_str());
        let write = db.write(
            &config.table,
            0,
            resource,
            lease,
            (config.id.as_str(), term, seq),
            inside,
        );
        let kind = answered(bound, write, resource, term, seq).await;
        log.record(kind);
    }
}

/// The history event of one write: accepted (with the write it replaced) or rejected, where no
/// answer within `bound` is a rejection of unknown outcome.
async fn answered(
    bound: Duration,
    write: impl std::future::Future<Output = Result<crate::resource::Prev, String>>,
    resource: Resource,
    term: u64,
    seq: u64,
) -> Kind {
    match tokio::time::timeout(bound, write).await {
        Ok(Ok(prev)) => Kind::OpAccepted {
            resource,
            term,
            seq,
            prev_node: prev.node,
            prev_term: prev.term,
            prev_seq: prev.seq,
        },
        Ok(Err(error)) => Kind::OpRejected {
            resource,
            term,
            seq,
            error,
        },
        Err(_) => Kind::OpRejected {
            resource,
            term,
            seq,
            error: format!("no answer within {bound:?} (outcome unknown)"),
        },
    }
}
