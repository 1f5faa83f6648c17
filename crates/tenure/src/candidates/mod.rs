//! The candidate registry: who campaigns for a name (and who only follows it), with what
//! priority, and since when — so that failover picks the best live candidate and a preferred
//! leader comes back (the rules are the model's: `model::Standing`).
//!
//! A layer on the store's transaction seam (`backend/tx.rs`): its own table
//! (`<prefix>candidate`), statements and handle; nothing below the store knows it.
//!
//! - **Registration rides on the campaigns a candidate already sends**: every campaign of an
//!   elector is one transaction that registers it (candidate id, priority, observer or not,
//!   metadata, last seen and live until, by the database's clock), reads its rivals, and lets
//!   the model decide the lease among them. No extra round trip per renew interval.
//! - A candidate **drops out** when its registration expires (its ttl after it was last seen:
//!   a crash), or at once when its elector stops cleanly. A campaign reads only what the rules
//!   need — the live rows, its own and the reservation target's — through an index, so dead
//!   rows cost it nothing; rows that expired a day ago are purged by the name's campaigns, at
//!   most 1,000 per campaign.
//! - Each handle is one **incarnation** (a token registered with the row): a candidate that
//!   restarts, even with the same id, begins a new run and settles again. A candidate whose
//!   tenures keep ending by expiry **backs off** (its row records how many in a row and until
//!   when): the rules are the model's (`model::Backoff`).
//! - An operator's **handover** ([`Candidates::handover`]) goes to a live candidate only
//!   (unless told the target is not yet started), and the tenure it begins stands against
//!   priorities (the target's row records the term it follows).
//! - An **observer** registers and follows the leader, never campaigns: a node that must know
//!   the leader and must never be it.
//! - Locks do not register: they have no priorities (their one-statement cycles stay as
//!   they are).

mod bodies;
mod handover;
pub(crate) mod statements;

use crate::error::{Error, Result};
use crate::model::{Backoff, DbTime, Lease, Op, Rival};
use crate::records::Applied;
use crate::store::Store;
use bodies::{Campaign, Leave, List};
pub use handover::Handover;
use std::sync::Arc;

use std::time::Duration;

/// One registered candidate of a name, as the registry shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The election.
    pub name: String,
    /// Its candidate id.
    pub candidate: String,
    /// Higher is preferred (default 0).
    pub priority: i32,
    /// Whether it only follows the leader (never campaigns).
    pub observer: bool,
    /// What it publishes (e.g. its address).
    pub metadata: Option<String>,
    /// When its current run of registrations began (it has been live since then).
    pub since: DbTime,
    /// When it last registered (database clock).
    pub seen_at: DbTime,
    /// Until when it counts as live without registering again.
    pub expires_at: DbTime,
    /// Its ttl.
    pub ttl: Duration,
    /// The longest it goes between two campaigns while live: its renew interval plus its
    /// database timeout.
    pub campaigns_within: Duration,
    /// Its settle time: how long a candidate of higher priority must have campaigned before
    /// this one gives way to it.
    pub settle: Duration,
    /// The incarnation (one elector's run) that registered last; `None` for a row an
    /// operator's handover wrote for a candidate not yet started.
    pub incarnation: Option<String>,
    /// How many of its tenures in a row ended by expiry.
    pub expiries: u32,
    /// Until when its priority does not count (its tenures kept ending by expiry).
    pub backoff_until: Option<DbTime>,
    /// The lease's term when an operator handed the name to it: its first tenure after that
    /// term is not handed over for priority.
    pub chosen_after: Option<u64>,
}

impl Candidate {
    /// Whether it counts as live at `now` (the database's clock).
    pub fn is_live(&self, now: DbTime) -> bool {
        self.expires_at > now
    }

    /// Whether its priority does not count at `now`: it backs off.
    pub fn backs_off(&self, now: DbTime) -> bool {
        self.backoff_until.is_some_and(|until| until > now)
    }

    fn backoff(&self) -> Backoff {
        Backoff {
            expiries: self.expiries,
            until: self.backoff_until,
        }
    }

    fn rival(&self) -> Rival {
        Rival {
            candidate: self.candidate.clone(),
            priority: self.priority,
            observer: self.observer,
            since: self.since,
            seen_at: self.seen_at,
            expires_at: self.expires_at,
            // Every registration, a campaign or a keep-alive, sets `expires_at` a ttl ahead.
            alive_at: DbTime(
                self.expires_at
                    .0
                    .saturating_sub(i64::try_from(self.ttl.as_micros()).unwrap_or(i64::MAX)),
            ),
            renew_ms: crate::model::duration_ms(self.campaigns_within),
            settle_ms: crate::model::duration_ms(self.settle),
            backoff_until: self.backoff_until,
        }
    }
}

/// The candidates of one name (or the live ones of every name), read with the database's
/// clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Roster {
    /// The database's instant of the read.
    pub now: DbTime,
    /// Sorted by name, then candidate id.
    pub candidates: Vec<Candidate>,
    /// The lease of the name, read in the same transaction ([`Candidates::list`]; `None`
    /// for [`Candidates::live`], and for a name without a lease row).
    pub lease: Option<Lease>,
}

/// How an elector registers at each campaign.
#[derive(Clone, Debug)]
pub(crate) struct Registration {
    pub name: String,
    pub candidate: String,
    pub priority: i32,
    pub observer: bool,
    pub metadata: Option<String>,
    pub ttl_ms: u64,
    /// Its renew interval plus its database timeout.
    pub renew_ms: u64,
    /// How long a better candidate must have been live before this one, leading, hands over.
    pub settle_ms: u64,
}

/// The registry on one store: the layer's handle. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Candidates {
    store: Store,
    /// Built from the store's dialect and prefix at the first transaction.
    statements: bodies::Cell,
    /// This handle's incarnation, registered with every campaign: a new handle (an elector
    /// started again, a restarted process) settles again whatever its candidate id.
    incarnation: Arc<str>,
}

impl Candidates {
    /// The registry on `store` (whose table `Store::connect` created with the lease's).
    pub fn new(store: Store) -> Candidates {
        Candidates {
            store,
            statements: bodies::Cell::default(),
            incarnation: format!("{:016x}", crate::rng::next_u64()).into(),
        }
    }

    /// Every registered candidate of `name`, live or not (see [`Candidate::is_live`]), with
    /// the name's lease as it was at the same instant.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a bad name, [`crate::Error::Timeout`],
    /// database errors.
    pub async fn list(&self, name: &str) -> Result<Roster> {
        crate::validate::name(name)?;
        let mut body = List::of(&self.statements, Some(name));
        self.store.transaction(&mut body).await?;
        Ok(body.roster())
    }

    /// Every live candidate of every name.
    ///
    /// # Errors
    /// [`Error::Timeout`], database errors.
    pub async fn live(&self) -> Result<Roster> {
        let mut body = List::of(&self.statements, None);
        self.store.transaction(&mut body).await?;
        Ok(body.roster())
    }

    /// One campaign of `registration`, registered in the same transaction: `op` decided by the
    /// model among the live rivals of the name; an observer's (`op` = `None`) only registers
    /// and reads the lease (answered as [`Effect::Unavailable`](crate::Effect::Unavailable)).
    pub(crate) async fn campaign(
        &self,
        registration: &Registration,
        op: Option<&Op>,
    ) -> Result<Applied> {
        let mut body = Campaign::new(&self.statements, registration, &self.incarnation, op);
        self.store.transaction(&mut body).await?;
        body.applied()
    }

    /// Hands `name` over to the candidate `to` (an operator's call, recorded with `actor`):
    /// by default the leader steps down at its next renewal and the lease is reserved for
    /// `to`; [`Handover::immediate`] installs `to` with a new term at once (unsafe unless
    /// writes are fenced). The tenure it begins stands: priorities do not hand it over (the
    /// next tenure follows them again).
    ///
    /// Unlike the bare lease operation [`Store::handover`], which neither checks nor marks,
    /// `to` must be a live candidate of `name` (not an observer) unless
    /// [`Handover::unregistered`] says it is a process not yet started.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name or id, or a target that is not
    /// a live candidate (nothing changed); [`Error::UnknownName`];
    /// [`Error::Timeout`], database errors.
    pub async fn handover(
        &self,
        name: &str,
        to: &str,
        how: Handover,
        actor: &str,
    ) -> Result<Applied> {
        crate::validate::name(name)?;
        crate::validate::candidate(to)?;
        let mut body = handover::HandingOver {
            statements: &self.statements,
            name,
            to,
            how,
            actor,
            answer: None,
        };
        self.store.transaction(&mut body).await?;
        body.answer.unwrap_or(Err(Error::Unsupported(
            "a handover that ran no transaction",
        )))
    }

    /// Keeps `registration` live for another ttl without campaigning: an elector that holds
    /// off (after a demote, longer than its ttl) is still a live candidate, not a campaigning
    /// one.
    pub(crate) async fn keep_alive(&self, registration: &Registration) -> Result<()> {
        let mut body = bodies::KeepAlive {
            statements: &self.statements,
            registration,
            incarnation: &self.incarnation,
        };
        self.store.transaction(&mut body).await
    }

    /// Drops `candidate` of `name` from the registry at once (a clean stop).
    pub(crate) async fn leave(&self, name: &str, candidate: &str) -> Result<()> {
        let mut body = Leave::new(&self.statements, name, candidate);
        self.store.transaction(&mut body).await
    }
}
