//! Spreading a group's shards over its live members (issue 29): a group `GROUP` of `N` shards,
//! each an ordinary lease with its own term, shared by the members that are alive — every
//! member owns ⌊N/M⌋ or ⌈N/M⌉ of them (fewer under a cap or by weight), sticky across joins
//! and leaves, and a crashed member's shards run elsewhere within its ttl and one renew
//! interval. No coordinator: every member runs the same IO-free rules (`model::spread`) on
//! what it reads.
//!
//! A layer on the store's transaction seam (`backend/tx.rs`), with tables of its own:
//!
//! - **Shard names**: shard `i` (0-based) of `GROUP` is the lease `GROUP/i` (decimal, no
//!   leading zeros: `jobs/0` … `jobs/11`), an ordinary lease name (1..=191 bytes) — so
//!   `tenure leader jobs/3`, `tenure history jobs/3` and fencing work on a shard as on any
//!   lease. [`shard_name`] builds it. A group has 1 to [`MAX_SHARDS`] shards.
//! - **Membership** is the layer's table `<prefix>spread_member`: one row per member (group,
//!   member id, its shard count, cap and weight, since / seen / live until by the database's
//!   clock), written at every tick, live until its ttl after its last one, dropped at a clean
//!   leave; rows of members that expired are purged by the group's own members.
//! - **The group** is `<prefix>spread_group`: one row per group, created by its first member,
//!   whose `paused` an operator sets ([`Spread::pause`]): a paused group stays paused whatever
//!   joins, a member of a larger N included.
//! - **A group's name is no election's** (`names.rs`): [`Spread::join`] refuses a group named
//!   like a held lease or with live candidates of an election, and [`check_no_group`] refuses
//!   a live group's name and its shards' names to everyone else — `tenure run`, `lock`,
//!   `every`, `serve --campaign`, and Consul's `?acquire=` in its own transaction.
//! - **A tick** (every renew interval, and whenever one of its shard guards comes back) is one
//!   transaction (`tick.rs`): the group's row share-locked, the group read in one statement
//!   (its live members and only the live or paused lease rows of its shards: the work grows
//!   with what is live, not with N), the member's row written, then `model::spread::plan`
//!   and its lease changes, each decided by the model under the lease row's lock: the renewal
//!   of every shard still believed, the release of every shard given back, the take of free
//!   ones (at most 256 a tick). Over its share a member *surrenders* its least preferred
//!   surplus shards — their guards report [`lost`](crate::Tenure::lost), and each lease is
//!   released once the work drops its guard, so the next owner starts after the work stopped.
//! - **Beliefs**: each shard's guard believes until the local deadline its last committed
//!   renewal allows, counted from the instant that tick's transaction was sent (`belief.rs`,
//!   as every guard); a tick that fails extends nothing.
//! - **Leaving**: [`Member::leave`] (or dropping the [`Member`]) surrenders every shard,
//!   releases each as its guard comes back (the work is given at most a ttl), and drops the
//!   member's row.
//!
//! # One owner per shard
//! Every shard is a lease, with the lease's rules (P1–P6): one believer at a time, terms that
//! strictly rise, stale holders that change nothing. The spreading rules only choose *which*
//! shards a member tries to take or gives back; members that disagree for a moment (views
//! read at different instants, a different `N` or cap while members restart) move shards
//! more than needed, never give a shard two owners. With a different `N`, each shard is
//! shared among the members whose `N` covers it, and shards beyond a member's `N` are not its
//! business: it neither takes nor releases them.
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

mod assignment;
mod guard;
mod member;
mod names;
mod shards;
pub(crate) mod statements;
mod tick;
mod view;

pub use assignment::Assignment;
pub use guard::ShardGuard;
#[cfg_attr(not(feature = "consul"), allow(unused_imports))]
pub(crate) use names::refusal_in;
pub(crate) use names::refusals_in;
pub use names::{check_no_group, GROUP_NAME, SHARD_NAME};

use crate::config::Timing;
use crate::error::{Error, Result};
use crate::model::spread::Member as Peer;
use crate::store::Store;
use crate::validate;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use view::Cell;

/// The most shards a group may have. A tick reads and plans only what is live in a group,
/// so a large N with a cap costs what the live shards cost.
pub const MAX_SHARDS: u32 = 1_000_000;

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

/// Every group with live members, and its shard count (the largest its live members give:
/// while members restart with a new `N` they may differ), by group name.
///
/// # Errors
/// [`Error::Timeout`], database errors.
pub async fn groups(store: &Store) -> Result<BTreeMap<String, u32>> {
    Ok(read_groups(store, None).await?.0)
}

/// Whether `group` is a group: it has a row, made by its first member's first tick (or by
/// an operator's pause) and never deleted.
///
/// # Errors
/// [`Error::Timeout`], database errors.
pub async fn exists(store: &Store, group: &str) -> Result<bool> {
    Ok(read_groups(store, Some(group)).await?.1)
}

async fn read_groups(store: &Store, group: Option<&str>) -> Result<(BTreeMap<String, u32>, bool)> {
    let statements = Cell::default();
    let mut body = view::Groups {
        statements: &statements,
        live: BTreeMap::new(),
        known: group.map(|g| (g, false)),
    };
    store.transaction(&mut body).await?;
    Ok((body.live, body.known.is_some_and(|(_, known)| known)))
}

/// Every group with live members ([`groups`]) and its assignment, all read in one
/// transaction at one database instant; each group in one statement, so no assignment mixes
/// two moments.
///
/// # Errors
/// [`Error::Timeout`], database errors.
pub async fn assignments(store: &Store) -> Result<Vec<Assignment>> {
    read(store, view::Which::All).await
}

/// Runs a [`view::Read`]: the assignments it saw.
async fn read(store: &Store, which: view::Which<'_>) -> Result<Vec<Assignment>> {
    let statements = Cell::default();
    let mut body = view::Read {
        statements: &statements,
        which,
        seen: Vec::new(),
    };
    store.transaction(&mut body).await?;
    Ok(body
        .seen
        .into_iter()
        .map(|(group, count, now, view)| Assignment::of(group, count, now, &view))
        .collect())
}

/// Checks a group of `shards` shards: 1 to [`MAX_SHARDS`], and every shard's name a valid
/// name.
///
/// # Errors
/// [`Error::Invalid`] naming the rule.
pub fn check(group: &str, shards: u32) -> Result<()> {
    validate::name(group)?;
    if !(1..=MAX_SHARDS).contains(&shards) {
        return Err(Error::Invalid {
            what: "shards",
            value: shards.to_string(),
            rule: "1 to 1000000",
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
    /// [`Error::Invalid`] for a bad group name, a shard count outside 1 to [`MAX_SHARDS`], or
    /// shard names over 191 bytes.
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
    /// row. Two live members must not share one (if they do, each still holds only the shards
    /// it took, and neither counts the other's).
    pub fn member(mut self, id: impl Into<String>) -> Self {
        self.member = Some(id.into());
        self
    }

    /// At most `k` shards on this member (1 to [`MAX_SHARDS`]); shards beyond every member's
    /// cap stay unowned.
    pub fn max_per_member(mut self, k: u32) -> Self {
        self.cap = Some(k);
        self
    }

    /// This member's weight (1 to 2147483647, default 1): shares are proportional to it.
    pub fn weight(mut self, w: u32) -> Self {
        self.weight = w;
        self
    }

    /// Each shard's lease ttl, and the member's row's: how long a crashed member's shards
    /// stay with it. The renew interval, margin and database timeout follow from it
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
    /// [`Error::Invalid`] for a bad member id, a weight outside 1 to 2147483647, a cap
    /// outside 1 to [`MAX_SHARDS`], or a group whose name is a held lease's or has live
    /// candidates of an election (what `group`); [`Error::UnsafeTiming`] for a ttl the timing
    /// model refuses; [`Error::Timeout`] and database errors from the check of the name.
    pub async fn join(self) -> Result<Member> {
        let id = self
            .member
            .clone()
            .unwrap_or_else(validate::default_candidate_id);
        validate::candidate(&id)?;
        if !(1..=i32::MAX.unsigned_abs()).contains(&self.weight) {
            return Err(Error::Invalid {
                what: "weight",
                value: self.weight.to_string(),
                rule: "1 to 2147483647",
            });
        }
        if let Some(cap) = self.cap.filter(|k| !(1..=MAX_SHARDS).contains(k)) {
            return Err(Error::Invalid {
                what: "max per member",
                value: cap.to_string(),
                rule: "1 to 1000000",
            });
        }
        let timing = Timing::from_ttl(self.ttl)?;
        names::check_name_is_free(&self.store, &self.group).await?;
        let store = self.store.with_timeout(timing.db_timeout());
        let me = tick::Me {
            group: self.group.clone(),
            member: Peer {
                id: id.clone(),
                weight: self.weight,
                shards: self.shards,
                cap: self.cap,
            },
            ttl_ms: crate::model::duration_ms(timing.ttl()),
        };
        let (send, guards) = mpsc::unbounded_channel();
        let (owned_tx, owned) = watch::channel(BTreeSet::new());
        let stop = CancellationToken::new();
        let (back, returns) = mpsc::unbounded_channel();
        let task = member::Task {
            shards: shards::Shards::new(
                self.group,
                self.shards,
                id.clone(),
                timing,
                store.clone(),
                back,
            ),
            store,
            me,
            timing,
            statements: Cell::default(),
            send,
            owned: owned_tx,
            returns,
            stop: stop.clone(),
            ticks: 0,
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
    /// included), the shards nobody owns and the paused ones, counted as this group of
    /// [`shards`](Spread::shards).
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

    /// Pauses the whole group, in one transaction: the group's row records it — so no member
    /// takes any shard of it, whatever its `N`, until [`resume`](Spread::resume), a member
    /// that joins meanwhile included — and every shard's lease that exists is paused, each
    /// with its `paused` event (by `actor`). Each owner's work is stopped as at any
    /// step-down: the member gives the shard back at its next tick (its guard reports lost)
    /// and the lease is released once the work drops it. Returns each shard lease's answer.
    ///
    /// # Errors
    /// [`Error::Timeout`], database errors (then nothing was paused).
    pub async fn pause(&self, actor: &str) -> Result<Vec<crate::Applied>> {
        self.admin(true, actor).await
    }

    /// Ends a pause of the whole group ([`pause`](Spread::pause)): the group's row and every
    /// paused shard's lease resumed in one transaction; the members take the shards again at
    /// their next tick.
    ///
    /// # Errors
    /// As [`pause`](Spread::pause).
    pub async fn resume(&self, actor: &str) -> Result<Vec<crate::Applied>> {
        self.admin(false, actor).await
    }

    async fn admin(&self, pause: bool, actor: &str) -> Result<Vec<crate::Applied>> {
        let statements = Cell::default();
        let mut body = view::Admin {
            statements: &statements,
            group: &self.group,
            pause,
            actor,
            applied: Vec::new(),
        };
        self.store.transaction(&mut body).await?;
        Ok(body.applied)
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

    /// The shards whose guards are out, believed and not asked back, updated at every tick.
    pub fn owned(&self) -> watch::Receiver<BTreeSet<u32>> {
        self.owned.clone()
    }

    /// Leaves the group: every shard asked back (its guard reports lost), each lease released
    /// as its guard is dropped (guards not yet taken from [`next`](Member::next) at once; the
    /// work is given at most a ttl), then the member's row dropped.
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
    fn groups_are_checked_with_their_last_shard_and_the_bound() {
        assert!(check("jobs", 12).is_ok());
        assert!(check("jobs", MAX_SHARDS).is_ok());
        for bad in [0, MAX_SHARDS + 1, u32::MAX] {
            let err = check("jobs", bad).unwrap_err().to_string();
            assert!(
                err.contains("shards") && err.contains("1 to 1000000"),
                "{err}"
            );
        }
        // 185 bytes + "/99999" is 191: fits; one more digit does not.
        let group = "g".repeat(185);
        assert!(check(&group, 99_999).is_ok());
        assert!(check(&group, 100_001).is_err());
        assert!(check("", 1).is_err());
    }
}
