//! Telemetry in one place: every metric tenure records, its name, labels and help, and the
//! few places it is recorded from.
//!
//! The library records through the [`metrics`] facade and installs no exporter: an
//! application that wants the series installs its own recorder (e.g.
//! `metrics-exporter-prometheus`) and may call [`describe`] to give them their help text and
//! units. Without a recorder every call here is a no-op.
//!
//! Recorded where everything passes, so that every layer — elector, locks, semaphores,
//! schedules, the Consul layer — is seen without a call of its own:
//! - the store's one bounded round trip (`round_trip`): latency, outcome, timeouts and
//!   database errors by kind, and the database clock's offset from the local wall clock
//!   (`clock_offset`);
//! - the start and end of every belief (`Seen`, owned by the belief in `belief.rs`):
//!   the leader gauge and term, hold time, losses by reason, and at each renewal how late it
//!   was against its interval and how much of the belief was left;
//! - spans (through the [`tracing`] facade, at debug level): one per store call — campaigns,
//!   renew batches, releases, handovers, admin calls, the Consul layer's transactions — and
//!   one per fence (`call_span`, `fence_span`). `tenure` exports them as OpenTelemetry
//!   traces when the `OTEL_*` variables are set; with no subscriber that wants them a span is
//!   never built (a disabled callsite costs one load);
//! - a watcher's successive reads of every lease ([`Vacancies`], fed by `tenure serve`): how
//!   long each name stood vacant before its next tenure.
//!
//! # Label cardinality
//! Labels come from small fixed sets (`op`, `outcome`, `kind`, `reason`, `role`) and from
//! `name`. Permits of a semaphore (`NAME#i`) are folded into `NAME`, and a process labels at
//! most [`MAX_NAMES`] distinct names: later ones are recorded as [`OTHER_NAME`], so an
//! application that locks one name per job cannot grow the exporter without bound.
//!
//! The local wall clock is read only for the clock offset, a figure for operators: no
//! decision uses it.

use crate::config::Timing;
use crate::error::Error;
use crate::model::{DbTime, Op};
use crate::records::Snapshot;
use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// How many distinct names one process labels; beyond, [`OTHER_NAME`].
pub const MAX_NAMES: usize = 1000;

/// The `name` label of the names beyond [`MAX_NAMES`].
pub const OTHER_NAME: &str = "_other";

/// Round trip of every store call (histogram, seconds; labels `op`, `outcome`).
pub const DB_SECONDS: &str = "tenure_database_seconds";
/// Failed store calls by error kind (counter; labels `op`, `kind`).
pub const DB_ERRORS: &str = "tenure_database_errors_total";
/// The database clock minus the local wall clock, at the latest answer (gauge, seconds).
pub const CLOCK_OFFSET: &str = "tenure_database_clock_offset_seconds";
/// Round trip of each elector campaign (histogram, seconds; label `name`).
pub const CAMPAIGN_SECONDS: &str = "tenure_campaign_seconds";
/// Lease time left at an elector's latest campaign (gauge, seconds; label `name`).
pub const LEASE_REMAINING: &str = "tenure_lease_remaining_seconds";
/// 1 while this process's elector leads the name (gauge; label `name`).
pub const IS_LEADER: &str = "tenure_is_leader";
/// The term of this process's latest tenure of the name (gauge; label `name`).
pub const TERM: &str = "tenure_term";
/// Elector transitions (counter; labels `name`, `event` = acquired | lost).
pub const TRANSITIONS: &str = "tenure_transitions_total";
/// 1 while this process holds the lock (gauge; label `name`).
pub const LOCK_HELD: &str = "tenure_lock_held";
/// Ended beliefs by reason (counter; labels `name`, `role`, `reason`).
pub const LOSSES: &str = "tenure_losses_total";
/// How long each belief lasted (histogram, seconds; labels `name`, `role`).
pub const HOLD_SECONDS: &str = "tenure_hold_seconds";
/// How long `Locks::lock` waited (histogram, seconds; labels `name`, `outcome`).
pub const LOCK_WAIT_SECONDS: &str = "tenure_lock_wait_seconds";
/// How late each renewal was sent against its interval (histogram, seconds; `name`, `role`).
pub const RENEW_LAG_SECONDS: &str = "tenure_renew_lag_seconds";
/// Belief left when a renewal's answer came (histogram, seconds; `name`, `role`).
pub const MARGIN_SECONDS: &str = "tenure_belief_margin_seconds";
/// The safety margin of the latest belief (gauge, seconds; `name`, `role`): what the alert
/// rules compare renew lag and clock offset with.
pub const SAFETY_MARGIN: &str = "tenure_safety_margin_seconds";
/// How long a name stood vacant before its next tenure, from a watcher's reads (histogram,
/// seconds; label `name`): see [`Vacancies`].
pub const VACANCY_SECONDS: &str = "tenure_vacancy_seconds";

/// Buckets suggested for every `_seconds` histogram above: a millisecond round trip on a
/// local database up to a minute-long hold or wait.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Gives every series its help text and unit: call it once after installing a recorder.
pub fn describe() {
    describe_histogram!(
        DB_SECONDS,
        Unit::Seconds,
        "Round trip of each database call of this process, by operation and outcome (ok, refused, error, timeout)."
    );
    describe_counter!(
        DB_ERRORS,
        "Database calls of this process that failed, by operation and kind (timeout, connect, read_only, server, io, pool, driver, corrupt)."
    );
    describe_gauge!(
        CLOCK_OFFSET,
        Unit::Seconds,
        "The database server's clock minus this host's wall clock at the latest answer (round trip midpoint)."
    );
    describe_histogram!(
        CAMPAIGN_SECONDS,
        Unit::Seconds,
        "Round trip of each campaign (acquire or renew) of this process's electors."
    );
    describe_gauge!(
        LEASE_REMAINING,
        Unit::Seconds,
        "Time left of the lease, as the database said at this process's latest campaign."
    );
    describe_gauge!(
        IS_LEADER,
        "1 while this process's elector leads the name, else 0."
    );
    describe_gauge!(
        TERM,
        "The term (fencing token) of this process's latest tenure of the name."
    );
    describe_counter!(
        TRANSITIONS,
        "Leadership transitions of this process's electors, by event (acquired, lost)."
    );
    describe_gauge!(LOCK_HELD, "1 while this process holds the lock, else 0.");
    describe_counter!(
        LOSSES,
        "Tenures and locks of this process that ended, by role and reason (released, replaced, deadline, dropped)."
    );
    describe_histogram!(
        HOLD_SECONDS,
        Unit::Seconds,
        "How long each tenure or held lock of this process lasted."
    );
    describe_histogram!(
        LOCK_WAIT_SECONDS,
        Unit::Seconds,
        "How long each wait for a lock lasted, by outcome (acquired, gave_up, error)."
    );
    describe_histogram!(
        RENEW_LAG_SECONDS,
        Unit::Seconds,
        "How much later than its renew interval each renewal was sent."
    );
    describe_histogram!(
        MARGIN_SECONDS,
        Unit::Seconds,
        "Belief left when each renewal's answer arrived: how close the holder came to losing it."
    );
    describe_gauge!(
        SAFETY_MARGIN,
        Unit::Seconds,
        "The safety margin of this process's latest tenure or lock of the name."
    );
    describe_histogram!(
        VACANCY_SECONDS,
        Unit::Seconds,
        "How long the name stood vacant before each new tenure seen by this process's watcher, by the database's clock."
    );
}

/// The `name` label of `name`: a semaphore's permit folded into the semaphore, and at most
/// [`MAX_NAMES`] distinct names per process.
pub fn name_label(name: &str) -> String {
    static SEEN: OnceLock<Mutex<Names>> = OnceLock::new();
    SEEN.get_or_init(|| Mutex::new(Names::new(MAX_NAMES)))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .label(name)
}

/// The names labelled so far, up to a cap.
struct Names {
    seen: HashSet<String>,
    cap: usize,
}

impl Names {
    fn new(cap: usize) -> Names {
        Names {
            seen: HashSet::new(),
            cap,
        }
    }

    fn label(&mut self, name: &str) -> String {
        let folded = match name.rsplit_once('#') {
            Some((base, i)) if !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()) => base,
            _ => name,
        };
        if !self.seen.contains(folded) {
            if self.seen.len() >= self.cap {
                return OTHER_NAME.to_string();
            }
            self.seen.insert(folded.to_string());
        }
        folded.to_string()
    }
}

// === the store's round trip ===

/// Records one bounded store call `op` that took `took` and ended with `result`, on the
/// metrics and on the call's `span`.
pub(crate) fn round_trip<T>(
    op: &'static str,
    took: Duration,
    result: &Result<T, Error>,
    span: &tracing::Span,
) {
    let outcome = match result.as_ref().map_err(error_kind) {
        Ok(_) => "ok",
        Err(None) => "refused",
        Err(Some(kind)) => {
            metrics::counter!(DB_ERRORS, "op" => op, "kind" => kind).increment(1);
            if kind == "timeout" {
                "timeout"
            } else {
                "error"
            }
        }
    };
    metrics::histogram!(DB_SECONDS, "op" => op, "outcome" => outcome).record(took.as_secs_f64());
    span.record("outcome", outcome);
}

// === spans ===

/// The span of one store call `op` (the `op` label above), of `name` and `term` where the
/// call has them: `tenure.campaign`, `tenure.release`, `tenure.renew_batch`,
/// `tenure.handover`, …, with the attributes `op`, `name`, `term` (the lease's after the
/// answer), `locks` (a renew batch's size) and, once answered, `outcome`. Disabled (and free) unless a subscriber enables `tenure` spans at debug level.
pub(crate) fn call_span(op: &'static str, name: Option<&str>, term: Option<u64>) -> tracing::Span {
    let span = tracing::debug_span!(
        "tenure.call",
        otel.name = span_name(op),
        op,
        name = tracing::field::Empty,
        term = tracing::field::Empty,
        outcome = tracing::field::Empty,
        locks = tracing::field::Empty,
    );
    if !span.is_disabled() {
        if let Some(name) = name {
            span.record("name", name);
        }
        if let Some(term) = term {
            span.record("term", term);
        }
    }
    span
}

/// The span of a fenced check of `name` in `term` (`tenure.fence`).
pub(crate) fn fence_span(name: &str, term: u64) -> tracing::Span {
    tracing::debug_span!("tenure.fence", name, term)
}

/// The span name of a store call: the operations a trace reader looks for by name, the rest
/// `tenure.store` (with their `op`).
fn span_name(op: &'static str) -> &'static str {
    match op {
        "campaign" => "tenure.campaign",
        "release" => "tenure.release",
        "renew" => "tenure.renew",
        "renew_many" => "tenure.renew_batch",
        "handover" => "tenure.handover",
        "demote" => "tenure.demote",
        "pause" => "tenure.pause",
        "resume" => "tenure.resume",
        "consul" => "tenure.consul",
        _ => "tenure.store",
    }
}

/// The term of a lease operation, where it names one.
pub(crate) fn op_term(op: &Op) -> Option<u64> {
    match op {
        Op::Campaign { term, .. } => *term,
        Op::Release { term, .. } | Op::Renew { term, .. } | Op::Succeed { term, .. } => Some(*term),
        _ => None,
    }
}

/// The `op` label of a lease operation.
pub(crate) fn op_label(op: &Op) -> &'static str {
    match op {
        Op::Campaign { .. } => "campaign",
        Op::Succeed { .. } => "succeed",
        Op::Release { .. } => "release",
        Op::Renew { .. } => "renew",
        Op::Handover { .. } => "handover",
        Op::Demote { .. } => "demote",
        Op::Pause => "pause",
        Op::Resume => "resume",
    }
}

/// The kind of a database failure, or `None` for an answer that is not one (a bad input, a
/// lost lease, an unknown name).
fn error_kind(e: &Error) -> Option<&'static str> {
    Some(match e {
        Error::Timeout(_) => "timeout",
        Error::Connect { .. } => "connect",
        Error::ReadOnly { .. } => "read_only",
        Error::Corrupt { .. } => "corrupt",
        Error::Database(sqlx::Error::Database(_)) => "server",
        Error::Database(sqlx::Error::Io(_) | sqlx::Error::Tls(_)) => "io",
        Error::Database(sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed) => "pool",
        Error::Database(_) => "driver",
        _ => return None,
    })
}

/// Records the database clock `db_now` read by a call sent at wall-clock `sent` and answered
/// at wall-clock `received`, against their midpoint.
pub(crate) fn clock_offset(db_now: DbTime, sent: SystemTime, received: SystemTime) {
    // Database instants are microseconds since the Unix epoch.
    let secs = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    };
    let local = (secs(sent) + secs(received)) / 2.0;
    metrics::gauge!(CLOCK_OFFSET).set(db_now.0 as f64 / 1e6 - local);
}

// === elector campaigns and lock waits ===

/// Records one campaign of an elector of `name`: its round trip and the lease time left.
pub(crate) fn campaign(name: &str, took: Duration, remaining: Option<Duration>) {
    let name = name_label(name);
    if let Some(left) = remaining {
        metrics::gauge!(LEASE_REMAINING, "name" => name.clone()).set(left.as_secs_f64());
    }
    metrics::histogram!(CAMPAIGN_SECONDS, "name" => name).record(took.as_secs_f64());
}

/// Records a wait for lock `name` that lasted `took` and ended with `outcome` (acquired,
/// gave_up, error).
pub(crate) fn lock_wait(name: &str, took: Duration, outcome: &'static str) {
    metrics::histogram!(LOCK_WAIT_SECONDS, "name" => name_label(name), "outcome" => outcome)
        .record(took.as_secs_f64());
}

// === beliefs ===

/// Whose belief: an elector's tenure or a held lock (the `role` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Leader,
    Lock,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Lock => "lock",
        }
    }
}

/// Why a belief ended (the `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Given up by this process: released, stopped, forgotten.
    Released,
    /// The database said so: taken over, demoted, paused, handed over, not renewed.
    Replaced,
    /// The local deadline passed, or an answer came too late to believe.
    Deadline,
    /// Its owner went away without saying (a dropped elector task or lock table).
    Dropped,
}

impl Ended {
    fn as_str(self) -> &'static str {
        match self {
            Ended::Released => "released",
            Ended::Replaced => "replaced",
            Ended::Deadline => "deadline",
            Ended::Dropped => "dropped",
        }
    }
}

/// What telemetry knows of one belief, from its start to its end; owned by the belief, so
/// every guard — elector, lock, semaphore permit — records the same series once.
#[derive(Debug)]
pub(crate) struct Seen {
    name: String,
    role: Role,
    started: Instant,
    interval: Duration,
    /// When the latest successful campaign or renewal was sent, and whether the end has been
    /// recorded (so that a belief dropped after it ended is not counted twice).
    state: Mutex<(Instant, bool)>,
}

impl Seen {
    /// Records the start of a belief in `term` of `name`, whose granting campaign was `sent`,
    /// kept with `timing`.
    pub(crate) fn start(name: &str, role: Role, term: u64, sent: Instant, timing: &Timing) -> Seen {
        let name = name_label(name);
        let margin = timing.safety_margin().as_secs_f64();
        metrics::gauge!(SAFETY_MARGIN, "name" => name.clone(), "role" => role.as_str()).set(margin);
        match role {
            Role::Leader => {
                metrics::counter!(TRANSITIONS, "name" => name.clone(), "event" => "acquired")
                    .increment(1);
                metrics::gauge!(IS_LEADER, "name" => name.clone()).set(1.0);
                metrics::gauge!(TERM, "name" => name.clone()).set(term as f64);
            }
            Role::Lock => metrics::gauge!(LOCK_HELD, "name" => name.clone()).set(1.0),
        }
        Seen {
            name,
            role,
            started: Instant::now(),
            interval: timing.renew_interval(),
            state: Mutex::new((sent, false)),
        }
    }

    /// Records a renewal sent at `sent` whose answer arrived with `left` of the belief.
    pub(crate) fn renewed(&self, sent: Instant, left: Duration) {
        let lag = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let due = state.0 + self.interval;
            state.0 = sent;
            sent.saturating_duration_since(due)
        };
        let (name, role) = (self.name.clone(), self.role.as_str());
        metrics::histogram!(RENEW_LAG_SECONDS, "name" => name.clone(), "role" => role)
            .record(lag.as_secs_f64());
        metrics::histogram!(MARGIN_SECONDS, "name" => name, "role" => role)
            .record(left.as_secs_f64());
    }

    /// Records the end of the belief, once.
    pub(crate) fn ended(&self, why: Ended) {
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.1 {
                return;
            }
            state.1 = true;
        }
        let (name, role) = (self.name.clone(), self.role.as_str());
        match self.role {
            Role::Leader => {
                metrics::counter!(TRANSITIONS, "name" => name.clone(), "event" => "lost")
                    .increment(1);
                metrics::gauge!(IS_LEADER, "name" => name.clone()).set(0.0);
            }
            Role::Lock => metrics::gauge!(LOCK_HELD, "name" => name.clone()).set(0.0),
        }
        metrics::counter!(LOSSES, "name" => name.clone(), "role" => role, "reason" => why.as_str())
            .increment(1);
        metrics::histogram!(HOLD_SECONDS, "name" => name, "role" => role)
            .record(self.started.elapsed().as_secs_f64());
    }
}

// === a watcher's view ===

/// The vacancy of every name, from a watcher's successive reads of the leases
/// (`Store::list`): at each read that shows a name's term risen, it records
/// [`VACANCY_SECONDS`] — from the end of the previous lease as last read (its expiry, or its
/// release) to the start of the new tenure, both by the database's clock; 0 where they
/// overlap (`handover --now`). Exact when a read saw the name vacant between the two tenures;
/// when a read missed the vacancy, the previous expiry read may be one renewal old, so the
/// figure is an upper bound by at most a poll interval. A name's first read, and its first
/// tenure ever, record nothing; the first read registers the name's histogram (exported at
/// zero), so that a rate over it counts the first vacancy too. IO-free: the caller reads,
/// this only compares.
#[derive(Debug, Default)]
pub struct Vacancies {
    /// Per name: the term and expiry of its latest read.
    last: HashMap<String, (u64, DbTime)>,
}

impl Vacancies {
    /// Nothing read yet.
    pub fn new() -> Vacancies {
        Vacancies::default()
    }

    /// Takes one read in, records the vacancies it ends and returns them (name, how long).
    pub fn observe(&mut self, snapshot: &Snapshot) -> Vec<(String, Duration)> {
        let mut ended = Vec::new();
        for lease in &snapshot.leases {
            let seen = (lease.term, lease.expires_at);
            let before = self.last.insert(lease.name.clone(), seen);
            let Some((term, expired)) = before else {
                // Exported at zero from the first read: Prometheus's `increase()` cannot see a
                // series' first sample as a rise, so a first vacancy would go uncounted.
                let _registered =
                    metrics::histogram!(VACANCY_SECONDS, "name" => name_label(&lease.name));
                continue;
            };
            if term == 0 || lease.term <= term {
                continue;
            }
            let micros = lease.acquired_at.0.saturating_sub(expired.0).max(0);
            let vacant = Duration::from_micros(u64::try_from(micros).unwrap_or(0));
            metrics::histogram!(VACANCY_SECONDS, "name" => name_label(&lease.name))
                .record(vacant.as_secs_f64());
            ended.push((lease.name.clone(), vacant));
        }
        // Every name read is in `last` now: anything more is a name gone from the table.
        if self.last.len() > snapshot.leases.len() {
            let read: HashSet<&str> = snapshot.leases.iter().map(|l| l.name.as_str()).collect();
            self.last.retain(|name, _| read.contains(name.as_str()));
        }
        ended
    }
}

#[cfg(test)]
mod tests;
