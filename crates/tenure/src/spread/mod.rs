//! Spreading a group's shards over its live members (issue 29): a group `GROUP` of `N` shards,
//! each an ordinary lease with its own term, shared by the members that are alive — every
//! member owns ⌊N/M⌋ or ⌈N/M⌉ of them (fewer under a cap or by weight), sticky across joins
//! and leaves, and a crashed member's shards run elsewhere within its ttl and one renew
//! interval. No coordinator: every member runs the same IO-free rules
//! (`model::spread`) on what it reads.
//!
//! A layer on the store's transaction seam (`backend/tx.rs`), built on the candidate
//! registry and on [`Locks`]:
//!
//! - **Shard names**: shard `i` (0-based) of `GROUP` is the lease `GROUP/i` (decimal, no
//!   leading zeros: `jobs/0` … `jobs/11`), an ordinary lease name (1..=191 bytes) — so
//!   `tenure leader jobs/3`, `tenure history jobs/3` and fencing work on a shard as on any
//!   lease. [`shard_name`] builds it.
//! - **A group's name is no election's**: [`Spread::join`] refuses a group named like a lease
//!   (an election or a lock) or one with live candidates of an election, and
//!   [`check_no_group`] (run by `tenure run`, `lock`, `every` and `serve --campaign`) refuses
//!   a live group's name and its shards' names for an election or a lock. Only registrations that are members
//!   (observers with `spread:shards=N`) count as members, so an elector of the group's name
//!   that slipped past the checks takes no share.
//! - **Membership** is the candidate registry (`<prefix>candidate`): a member registers as an
//!   observer of the group's name `GROUP` (which no election uses), its weight as its
//!   priority and `spread:shards=N` as its metadata (so that [`groups`] finds the group and
//!   its `N`), live until its ttl after its last tick by the database's clock; `tenure
//!   candidates GROUP` lists the members.
//! - **A tick** (every renew interval, and whenever one of its shard guards is dropped): one
//!   transaction registers the member and reads the live members and every shard's lease
//!   (one range read of the lease table, `GROUP/` ≤ name < `GROUP0`). The member then runs
//!   `model::spread::plan`: over its share it *surrenders* its least preferred surplus
//!   shards — their guards report [`lost`](crate::Tenure::lost), and each lease is released
//!   once the work drops its guard, so the next owner starts after the work stopped — and
//!   under its share it tries to take free shards ([`Locks::try_lock`], one statement each).
//! - **Renewal**: a member's shards are locks of one [`Locks`] (its holder id is the member
//!   id), so one keep-alive task renews them all in one batch per renew interval.
//! - **Pausing**: [`Spread::pause`] pauses every shard's lease in one transaction: each owner's
//!   renewal is refused, so its guard reports lost at its next keep-alive, and no member takes
//!   a paused shard until [`Spread::resume`].
//! - **Leaving**: [`Member::leave`] (or dropping the [`Member`]) surrenders every shard, waits
//!   (at most a ttl) for the work to drop the guards, and drops the registration.
//!
//! # One owner per shard
//! Every shard is a lease, with the lease's rules (P1–P6): one believer at a time, terms that
//! strictly rise, stale holders that change nothing. The spreading rules only choose *which*
//! shards a member tries to take or gives back; members that disagree for a moment (views
//! read at different instants, a different `N` or cap while members restart) move shards
//! more than needed, never give a shard two owners. With a different `N`, shards beyond a
//! member's `N` are simply not its business: it neither takes nor releases them.
//!
//! ```
//! # async fn f(store: tenure::Store) -> tenure::Result<()> {
//! use std::time::Duration;
//! let mut member = tenure::Spread::new(store, "partitions", 64)?
//!     .ttl(Duration::from_secs(10))
//!     .join()
//!     .await?;
//! while let Some(shard) = member.next().await {
//!     tokio::spawn(async move {
//!         let partition = shard.shard();
//!         tokio::select! {
//!             () = shard.lost() => {}       // moved, or not renewed in time: stop
//!             () = async { /* consume partition, fenced with shard.term() */ } => {}
//!         }
//!         drop(shard); // released now: the next owner may start
//!     });
//! }
//! # Ok(()) }
//! ```

mod guard;
mod member;
mod names;
mod view;

pub use guard::ShardGuard;
pub use names::check_no_group;
use names::{check_name_is_free, shards_in};

use crate::candidates::{Candidate, Candidates, Registration};
use crate::config::Timing;
use crate::error::{Error, Result};
use crate::lock::{LockOptions, Locks};
use crate::model::DbTime;
use crate::store::Store;
use crate::validate;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The lease name of shard `i` of `group`: `GROUP/i`.
pub fn shard_name(group: &str, i: u32) -> String {
    format!("{group}/{i}")
}

/// The shard a lease name is of `group`, if it is one (`GROUP/i`, `i` in canonical decimal).
pub(crate) fn shard_of(group: &str, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(group)?.strip_prefix('/')?;
    let i: u32 = rest.parse().ok()?;
    (i.to_string() == rest).then_some(i)
}

/// The metadata a member registers with: its group's shard count.
fn metadata(shards: u32) -> String {
    format!("{METADATA}{shards}")
}

const METADATA: &str = "spread:shards=";

/// Every group with live members, and its shard count (the largest its live members give:
/// while members restart with a new `N` they may differ), by group name.
///
/// # Errors
/// [`Error::Timeout`], database errors.
pub async fn groups(store: &Store) -> Result<BTreeMap<String, u32>> {
    let roster = Candidates::new(store.clone()).live().await?;
    Ok(groups_of(&roster.candidates))
}

/// The groups among live registrations: their members' names.
fn groups_of(live: &[Candidate]) -> BTreeMap<String, u32> {
    let mut groups: BTreeMap<String, u32> = BTreeMap::new();
    for c in live.iter().filter(|c| c.observer) {
        if let Some(n) = shards_in(c.metadata.as_deref()) {
            let most = groups.entry(c.name.clone()).or_default();
            *most = (*most).max(n);
        }
    }
    groups
}

/// Every group with live members ([`groups`]) and its assignment, all read in one
/// transaction at one database instant; each group's members and shards in one statement,
/// so no assignment mixes two moments.
///
/// # Errors
/// [`Error::Timeout`], database errors.
pub async fn assignments(store: &Store) -> Result<Vec<Assignment>> {
    read(store, view::Which::All).await
}

/// Runs a [`view::Read`]: the assignments it saw.
async fn read(store: &Store, which: view::Which<'_>) -> Result<Vec<Assignment>> {
    let statements = OnceLock::new();
    let registry = Candidates::new(store.clone());
    let mut body = view::Read {
        statements: &statements,
        registry: &registry,
        which,
        seen: None,
    };
    store.transaction(&mut body).await?;
    let (now, seen) = body
        .seen
        .ok_or(Error::Unsupported("a read that ran no transaction"))?;
    Ok(seen.into_iter().map(|s| Assignment::of(now, s)).collect())
}

/// Checks a group of `shards` shards: at least one, and every shard's name a valid name.
///
/// # Errors
/// [`Error::Invalid`] naming the rule.
pub fn check(group: &str, shards: u32) -> Result<()> {
    validate::name(group)?;
    if shards == 0 {
        return Err(Error::Invalid {
            what: "shards",
            value: "0".into(),
            rule: "must be at least 1",
        });
    }
    validate::name(&shard_name(group, shards - 1))
}

/// A group of shards to join: its name, how many shards, and how this member takes part.
/// [`join`](Spread::join) starts the member.
#[derive(Clone, Debug)]
pub struct Spread {
    store: Store,
    group: String,
    shards: u32,
    member: Option<String>,
    cap: Option<u32>,
    weight: u32,
    ttl: Duration,
}

impl Spread {
    /// The group `group` of `shards` shards (`GROUP/0` … `GROUP/N-1`) on `store`. A member
    /// joins with the default candidate id, weight 1, no cap and a 10 s ttl.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad group name, 0 shards, or shard names over 191 bytes.
    pub fn new(store: Store, group: impl Into<String>, shards: u32) -> Result<Spread> {
        let group = group.into();
        check(&group, shards)?;
        Ok(Spread {
            store,
            group,
            shards,
            member: None,
            cap: None,
            weight: 1,
            ttl: Duration::from_secs(10),
        })
    }

    /// This member's id (default `<hostname>-<pid>-<random>`): its shards' holder id and its
    /// registration. Two live members must not share one (if they do, each still holds only
    /// the shards it took, and neither counts the other's).
    pub fn member(mut self, id: impl Into<String>) -> Self {
        self.member = Some(id.into());
        self
    }

    /// At most `k` shards on this member; shards beyond every member's cap stay unowned.
    pub fn max_per_member(mut self, k: u32) -> Self {
        self.cap = Some(k);
        self
    }

    /// This member's weight (at least 1, default 1): shares are proportional to it.
    pub fn weight(mut self, w: u32) -> Self {
        self.weight = w;
        self
    }

    /// Each shard's lease ttl, and the member's registration's: how long a crashed member's
    /// shards stay with it. The renew interval, margin and database timeout follow from it
    /// ([`Timing::from_ttl`]).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The group's name.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// How many shards it has.
    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// Joins the group: starts this member's task on the current tokio runtime. Its first
    /// tick runs at once.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad member id, a weight or cap of 0, a weight above
    /// `i32::MAX`, or a group whose name is a lease's or has live candidates of an election
    /// (what `group`); [`Error::UnsafeTiming`] for a ttl the timing model refuses;
    /// [`Error::Timeout`] and database errors from the check of the name.
    pub async fn join(self) -> Result<Member> {
        let id = self
            .member
            .clone()
            .unwrap_or_else(validate::default_candidate_id);
        validate::candidate(&id)?;
        let priority = i32::try_from(self.weight).ok().filter(|&w| w >= 1);
        let priority = priority.ok_or_else(|| Error::Invalid {
            what: "weight",
            value: self.weight.to_string(),
            rule: "1 to 2147483647",
        })?;
        if self.cap == Some(0) {
            return Err(Error::Invalid {
                what: "max per member",
                value: "0".into(),
                rule: "must be at least 1",
            });
        }
        let timing = Timing::from_ttl(self.ttl)?;
        check_name_is_free(&self.store, &self.group).await?;
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let store = self.store.with_timeout(timing.db_timeout());
        let registration = Registration {
            name: self.group.clone(),
            candidate: id.clone(),
            priority,
            observer: true,
            metadata: Some(metadata(self.shards)),
            ttl_ms: ms(timing.ttl()),
            renew_ms: ms(timing.renew_interval() + timing.db_timeout()),
            settle_ms: 0,
        };
        let (send, guards) = mpsc::unbounded_channel();
        let (owned_tx, owned) = watch::channel(BTreeSet::new());
        let stop = CancellationToken::new();
        let (back, returns) = mpsc::unbounded_channel();
        let task = member::Task {
            locks: Locks::with_holder(self.store.clone(), id.clone())?,
            registry: Candidates::new(store.clone()),
            store,
            group: self.group,
            shards: self.shards,
            cap: self.cap,
            weight: self.weight,
            timing,
            options: LockOptions::default().ttl(self.ttl),
            registration,
            statements: Arc::default(),
            send,
            owned: owned_tx,
            back,
            returns,
            stop: stop.clone(),
        };
        Ok(Member {
            id,
            guards,
            owned,
            stop,
            task: Some(tokio::spawn(task.run())),
        })
    }

    /// The group's assignment now: each live member's shards (members that own none
    /// included), and the shards nobody owns.
    ///
    /// # Errors
    /// [`Error::Timeout`], database errors.
    pub async fn assignment(&self) -> Result<Assignment> {
        let which = view::Which::One {
            group: &self.group,
            count: self.shards,
        };
        read(&self.store, which)
            .await?
            .pop()
            .ok_or(Error::Unsupported("a read of one group that saw none"))
    }
}

impl Spread {
    /// Pauses the whole group: every shard's lease (`GROUP/0` … `GROUP/N-1`) paused in one
    /// transaction, each with its `paused` event (by `actor`). Each owner's work is stopped as
    /// at any step-down — the shard's renewal is refused at the member's next keep-alive, its
    /// guard reports lost, and the lease is released once the work drops it — and no member
    /// takes a paused shard until [`resume`](Spread::resume). Returns each shard's answer.
    ///
    /// # Errors
    /// [`Error::Timeout`], database errors (then no shard was paused).
    pub async fn pause(&self, actor: &str) -> Result<Vec<crate::Applied>> {
        self.admin(crate::Op::Pause, actor).await
    }

    /// Ends a pause of the whole group ([`pause`](Spread::pause)): every shard resumed in one
    /// transaction; the members take them again at their next tick.
    ///
    /// # Errors
    /// As [`pause`](Spread::pause).
    pub async fn resume(&self, actor: &str) -> Result<Vec<crate::Applied>> {
        self.admin(crate::Op::Resume, actor).await
    }

    async fn admin(&self, op: crate::Op, actor: &str) -> Result<Vec<crate::Applied>> {
        let mut body = view::Admin {
            group: &self.group,
            count: self.shards,
            op,
            actor,
            applied: Vec::new(),
        };
        self.store.transaction(&mut body).await?;
        Ok(body.applied)
    }
}

/// A group's assignment, as one read saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The group.
    pub group: String,
    /// Its shard count, as the read was asked.
    pub shards: u32,
    /// The database's instant of the read.
    pub now: DbTime,
    /// Each live member (and any other live holder of a shard) → the shards it owns.
    pub members: BTreeMap<String, Vec<u32>>,
    /// The shards with no live holder.
    pub unowned: Vec<u32>,
    /// Each shard's current term (0: never held).
    pub terms: Vec<u64>,
    /// The shards paused ([`Spread::pause`], or `tenure pause GROUP/i`): nobody takes them.
    pub paused: Vec<u32>,
}

impl Assignment {
    fn of(now: DbTime, seen: view::Seen) -> Assignment {
        let mut members: BTreeMap<String, Vec<u32>> =
            seen.members.into_iter().map(|m| (m, Vec::new())).collect();
        let mut unowned = Vec::new();
        for (i, owner) in (0..seen.count).zip(&seen.shards.owners) {
            match owner {
                Some(holder) => members.entry(holder.clone()).or_default().push(i),
                None => unowned.push(i),
            }
        }
        Assignment {
            group: seen.group,
            shards: seen.count,
            now,
            members,
            unowned,
            terms: seen.shards.terms,
            paused: (0..seen.count)
                .zip(&seen.shards.paused)
                .filter_map(|(i, &p)| p.then_some(i))
                .collect(),
        }
    }
}

/// A member of a group: a stream of the shards it takes ([`next`](Member::next)) and a
/// watch of the ones its work holds ([`owned`](Member::owned)). Dropping it leaves the group
/// in the background, as [`leave`](Member::leave) does.
#[derive(Debug)]
pub struct Member {
    id: String,
    guards: mpsc::UnboundedReceiver<ShardGuard>,
    owned: watch::Receiver<BTreeSet<u32>>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Member {
    /// This member's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The next shard this member took, or `None` once it has left.
    ///
    /// # Cancel safety
    /// Cancel safe: a guard not returned stays for the next call.
    pub async fn next(&mut self) -> Option<ShardGuard> {
        self.guards.recv().await
    }

    /// The shards whose guards are out and not asked back, updated at every tick.
    pub fn owned(&self) -> watch::Receiver<BTreeSet<u32>> {
        self.owned.clone()
    }

    /// Leaves the group: every shard asked back (its guard reports lost), each lease released
    /// as its guard is dropped (guards not yet taken from [`next`](Member::next) at once; the
    /// work is given at most a ttl), then the registration dropped.
    ///
    /// # Cancel safety
    /// If cancelled, the leave goes on in the background.
    pub async fn leave(mut self) {
        self.stop.cancel();
        self.guards.close();
        while self.guards.try_recv().is_ok() {}
        if let Some(task) = self.task.take() {
            if let Err(e) = task.await {
                tracing::warn!(member = self.id, error = %e, "spread: the member's task failed");
            }
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_round_trip_and_nothing_else_is_a_shard() {
        assert_eq!(shard_name("jobs", 3), "jobs/3");
        assert_eq!(shard_of("jobs", "jobs/3"), Some(3));
        assert_eq!(shard_of("jobs", "jobs/0"), Some(0));
        for other in [
            "jobs/03", "jobs/", "jobs/x", "jobs/3/4", "jobsx/3", "job/3", "jobs3",
        ] {
            assert_eq!(shard_of("jobs", other), None, "{other}");
        }
    }

    #[test]
    fn groups_are_checked_with_their_last_shard() {
        assert!(check("jobs", 12).is_ok());
        let err = check("jobs", 0).unwrap_err().to_string();
        assert!(
            err.contains("shards") && err.contains("at least 1"),
            "{err}"
        );
        // 185 bytes + "/99999" is 191: fits; one more digit does not.
        let group = "g".repeat(185);
        assert!(check(&group, 99_999).is_ok());
        assert!(check(&group, 100_001).is_err());
        assert!(check("", 1).is_err());
    }
}
