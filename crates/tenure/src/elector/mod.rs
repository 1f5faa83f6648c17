//! The [`Elector`]: the campaign loop, the role watch and [`LeaderGuard`].

mod guard;
mod task;

pub use guard::LeaderGuard;

use crate::candidates::{Candidates, Registration};
use crate::config::Timing;
use crate::error::{Error, Result};
use crate::model::duration_ms;
use crate::records::LeaderInfo;
use crate::store::Store;
use crate::validate;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What this elector currently is.
///
/// Exhaustive on purpose: applications match on it, and a new role would change what they must
/// do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Not yet known, or the database cannot be reached (and this elector does not lead).
    Unknown,
    /// Someone else leads (`leader`), or nobody does right now (`None`).
    Follower {
        /// Who leads, as last read (`None`: nobody right now).
        leader: Option<LeaderInfo>,
    },
    /// This elector leads with fencing token `term` until at most `deadline` (local, monotonic).
    Leader {
        /// The fencing token of this tenure.
        term: u64,
        /// The local, monotonic instant at which this elector stops believing it leads.
        deadline: Instant,
    },
    /// Campaigning is paused on this node ([`Elector::pause`]).
    Paused,
    /// The elector has stopped.
    Stopped,
}

impl Role {
    /// Whether this is [`Role::Leader`] and its deadline has not passed (the clock is read
    /// here, so this is right even before the elector's task has noticed the deadline).
    pub fn is_leader(&self) -> bool {
        matches!(self, Role::Leader { deadline, .. } if Instant::now() < *deadline)
    }
}

pub(crate) enum Command {
    Release {
        term: u64,
        reason: Option<String>,
        reply: oneshot::Sender<Result<()>>,
    },
    Pause,
    Resume,
    Shutdown {
        reply: oneshot::Sender<()>,
    },
}

/// Configures an [`Elector`].
#[derive(Debug)]
pub struct ElectorBuilder {
    store: Store,
    name: String,
    candidate: Option<String>,
    metadata: Option<String>,
    timing: Timing,
    priority: i32,
    observer: bool,
    settle: Option<Duration>,
}

impl ElectorBuilder {
    /// The candidate id. Default `<hostname>-<pid>-<4 random chars>`.
    pub fn candidate(mut self, id: impl Into<String>) -> Self {
        self.candidate = Some(id.into());
        self
    }

    /// The metadata published while leading (e.g. this node's address).
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = Some(metadata.into());
        self
    }

    /// The timings. Default [`Timing::default`].
    pub fn timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    /// This candidate's priority among the candidates of the name (higher preferred; default
    /// 0). A priority counts once its candidate has been seen campaigning for the
    /// [settle](ElectorBuilder::settle) time in this elector's run, and while it is not backing
    /// off (its tenures kept ending by expiry: for its ttl after the first, doubling up to 32
    /// ttls). A vacant or expired lease waits for a campaigning candidate whose higher priority
    /// counts (for its renew interval plus its database timeout after it was last seen, at
    /// most), and a leader hands over to one — gracefully: it stops its work and releases
    /// before the better one can start. Equal priorities change nothing. The rules:
    /// `docs/design-notes.md#candidates-and-priorities`.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Registers and follows the leader (the role shows who leads, with its term and
    /// metadata) but never campaigns: for a node that must know the leader and must never be
    /// it. Observers are never preferred.
    pub fn observe(mut self) -> Self {
        self.observer = true;
        self
    }

    /// How long a candidate must have been seen campaigning, in one run (a restart begins
    /// another, whatever its id), before its priority counts for this one: before this one,
    /// leading, hands over to it, or, free, waits for it. Default: one renew interval. A
    /// settle time longer than a flapping candidate's runs keeps it from ever taking the lead.
    pub fn settle(mut self, settle: Duration) -> Self {
        self.settle = Some(settle);
        self
    }

    /// Validates and starts the campaign loop on the current tokio runtime.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name, candidate id or metadata, or a settle time beyond
    /// [`MAX_DURATION`](crate::validate::MAX_DURATION).
    pub fn spawn(self) -> Result<Elector> {
        validate::name(&self.name)?;
        let candidate = self
            .candidate
            .unwrap_or_else(validate::default_candidate_id);
        validate::candidate(&candidate)?;
        if let Some(m) = &self.metadata {
            validate::metadata(m)?;
        }
        let settle = self.settle.unwrap_or(self.timing.renew_interval());
        let registration = Registration {
            name: self.name.clone(),
            candidate: candidate.clone(),
            priority: self.priority,
            observer: self.observer,
            metadata: self.metadata.clone(),
            ttl_ms: duration_ms(self.timing.ttl()),
            renew_ms: duration_ms(self.timing.renew_interval() + self.timing.db_timeout()),
            settle_ms: validate::duration_ms("settle", settle)?,
        };
        let (role_tx, role) = watch::channel(Role::Unknown);
        let (guard_tx, guard) = watch::channel(None);
        let (commands, command_rx) = mpsc::channel(16);
        let store = self.store.with_timeout(self.timing.db_timeout());
        let task = task::Task {
            changes: self.store.changes(),
            registry: Candidates::new(store.clone()),
            registration,
            registered: true,
            store,
            name: self.name.clone(),
            me: candidate.clone(),
            metadata: self.metadata,
            timing: self.timing,
            role: role_tx,
            guard: guard_tx,
            commands: command_rx,
            command_tx: commands.downgrade(),
            tenure: None,
            ledger: Default::default(),
            paused: false,
            not_before: Instant::now(),
            registered_at: Instant::now(),
        };
        let handle = tokio::spawn(task.run());
        Ok(Elector {
            name: self.name,
            candidate,
            role,
            guard,
            commands,
            task: Some(handle),
        })
    }
}

/// A running campaign: a spawned loop for one (name, candidate) that publishes its role
/// and hands out [`LeaderGuard`]s.
///
/// # Timing
/// - The holder renews every `renew_interval`. Its belief ends at its local deadline (the
///   instant before it sent its last successful campaign + `ttl − safety_margin`), even if the
///   database hangs: every call is raced against that deadline and bounded by `db_timeout`.
/// - An answer that arrives after its own deadline is not believed.
/// - A follower that sees a live holder with `r` left tries again at `r` + jitter, and at least
///   every `renew_interval`; on PostgreSQL a NOTIFY wakes it at once.
/// - Only a campaign that names the term this elector holds renews it; a campaign that names
///   none (a new tenure wanted) finds a live lease held, whoever its holder id is. So two
///   electors with one candidate id never both lead, and a restart with the id of a crashed
///   incarnation waits for the old lease to expire and then takes the next term.
/// - A tenure that ended locally is never resumed: if the database still names this candidate
///   with that term (a release failed, a deadline passed), the elector releases it before it
///   campaigns again, so every [`LeaderGuard`] has a term of its own.
/// - Releases wait for the tenure's work: the lease is released only once every clone of its
///   guard has been dropped, or at its local deadline at the latest.
/// - After a demote the elector holds off until the lease's lock-delay has run out plus
///   [`Timing::release_hold_off`], so that another live candidate takes the lead; alone, it
///   leads again after that. Meanwhile it keeps its registration live every renew interval
///   without campaigning: it is still a live candidate, but nobody waits for it. After a handover to another candidate it keeps polling: the
///   reservation keeps it out until the target has taken the lease, or the reservation has
///   lapsed (the target stopped campaigning: then it leads again at its next poll).
///
/// # Metrics
/// Through the [`metrics`](https://docs.rs/metrics) facade (no-ops unless the application
/// installs a recorder, as `tenure serve` does for Prometheus), labelled by `name`:
/// `tenure_campaign_seconds` (histogram of each campaign's round trip),
/// `tenure_database_errors_total`, `tenure_transitions_total{event=acquired|lost}`,
/// `tenure_is_leader`, `tenure_term`, `tenure_lease_remaining_seconds`.
///
/// # Cancel safety
/// The loop runs in its own task. Dropping the [`Elector`] stops it after a best-effort
/// release; aborting the task (or a panic in it) ends the current tenure's [`LeaderGuard`] at
/// once (its signal fires on drop) and leaves the lease to expire.
#[derive(Debug)]
pub struct Elector {
    name: String,
    candidate: String,
    role: watch::Receiver<Role>,
    guard: watch::Receiver<Option<LeaderGuard>>,
    commands: mpsc::Sender<Command>,
    task: Option<JoinHandle<()>>,
}

impl Elector {
    /// Starts configuring an elector for `name` on `store`.
    pub fn builder(store: Store, name: impl Into<String>) -> ElectorBuilder {
        ElectorBuilder {
            store,
            name: name.into(),
            candidate: None,
            metadata: None,
            timing: Timing::default(),
            priority: 0,
            observer: false,
            settle: None,
        }
    }

    /// The name campaigned for.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This elector's candidate id.
    pub fn candidate(&self) -> &str {
        &self.candidate
    }

    /// A watch of this elector's role.
    pub fn role(&self) -> watch::Receiver<Role> {
        self.role.clone()
    }

    /// The guard of the current tenure, if this elector leads now.
    pub fn current(&self) -> Option<LeaderGuard> {
        self.guard.borrow().clone().filter(|g| !g.is_lost())
    }

    /// Waits until this elector leads and returns the guard of that tenure (to read who leads
    /// now, see [`Store::leader`]).
    ///
    /// # Errors
    /// [`Error::Shutdown`] if the elector stops first.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn wait_until_leader(&self) -> Result<LeaderGuard> {
        let mut guard = self.guard.clone();
        loop {
            if let Some(g) = guard.borrow_and_update().clone().filter(|g| !g.is_lost()) {
                return Ok(g);
            }
            guard.changed().await.map_err(|_| Error::Shutdown)?;
        }
    }

    /// Stops campaigning on this node (a local pause): a leader ends its tenure at once and
    /// releases once every guard clone is dropped (at the deadline at the latest), a follower
    /// stops trying. Other nodes are not affected; see [`Store::pause`] for a cluster-wide
    /// pause.
    pub async fn pause(&self) -> Result<()> {
        self.commands
            .send(Command::Pause)
            .await
            .map_err(|_| Error::Shutdown)
    }

    /// Resumes campaigning on this node.
    pub async fn resume(&self) -> Result<()> {
        self.commands
            .send(Command::Resume)
            .await
            .map_err(|_| Error::Shutdown)
    }

    /// Stops the loop at once *without* releasing, as a crash would: the current guard's
    /// signal fires now and the lease expires by itself after its ttl.
    pub fn abort(mut self) {
        if let Some(guard) = self.guard.borrow().as_ref() {
            guard.lost_token().cancel();
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    /// Releases the lease if this elector leads, and stops the loop. The tenure ends at once;
    /// the release waits until every clone of its guard has been dropped, or until the local
    /// deadline at the latest. A release the database did not answer in time (or another
    /// failure that may pass) is tried again until that deadline; after it, the lease expires
    /// by itself (a ttl after its last renewal).
    ///
    /// # Cancel safety
    /// If cancelled, the loop still stops (it sees the dropped handle) and releases.
    pub async fn shutdown(mut self) {
        let (reply, done) = oneshot::channel();
        if self
            .commands
            .send(Command::Shutdown { reply })
            .await
            .is_ok()
        {
            let _ = done.await;
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}
