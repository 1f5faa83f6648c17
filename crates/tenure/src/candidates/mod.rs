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
//!   a crash), or at once when its elector stops cleanly. Rows that expired a day ago are
//!   purged when their name is next campaigned for.
//! - An **observer** registers and follows the leader, never campaigns: a node that must know
//!   the leader and must never be it.
//! - Locks do not register: they have no priorities (their one-statement cycles stay as
//!   they are).

mod bodies;
pub(crate) mod statements;

use crate::error::Result;
use crate::model::Op;
use crate::model::{DbTime, Rival};
use crate::records::Applied;
use crate::store::Store;
use bodies::{Campaign, Leave, List};
use statements::Statements;
use std::sync::{Arc, OnceLock};
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
}

impl Candidate {
    /// Whether it counts as live at `now` (the database's clock).
    pub fn is_live(&self, now: DbTime) -> bool {
        self.expires_at > now
    }

    fn rival(&self) -> Rival {
        Rival {
            candidate: self.candidate.clone(),
            priority: self.priority,
            observer: self.observer,
            since: self.since,
            seen_at: self.seen_at,
            expires_at: self.expires_at,
            renew_ms: u64::try_from(self.campaigns_within.as_millis()).unwrap_or(u64::MAX),
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
    statements: Arc<OnceLock<Statements>>,
}

impl Candidates {
    /// The registry on `store` (whose table `Store::connect` created with the lease's).
    pub fn new(store: Store) -> Candidates {
        Candidates {
            store,
            statements: Arc::default(),
        }
    }

    /// Every registered candidate of `name`, live or not (see [`Candidate::is_live`]).
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) for a bad name, [`Error::Timeout`](crate::Error::Timeout),
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
    /// [`Error::Timeout`](crate::Error::Timeout), database errors.
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
        let mut body = Campaign::new(&self.statements, registration, op);
        self.store.transaction(&mut body).await?;
        body.applied()
    }

    /// Drops `candidate` of `name` from the registry at once (a clean stop).
    pub(crate) async fn leave(&self, name: &str, candidate: &str) -> Result<()> {
        let mut body = Leave::new(&self.statements, name, candidate);
        self.store.transaction(&mut body).await
    }
}
