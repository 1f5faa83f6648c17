//! The Consul layer's rules, written once over [`ConsulTx`], the handful of row reads and
//! writes of one transaction. Every lock decision is the lease model's
//! (`ConsulTx::lease` runs [`decide`](crate::model) under the lease row's lock); these rules
//! only say which lease operation a Consul request is, and keep the sessions and values.

use super::error::{Error, Result};
use super::rows::{ConsulTx, EntryRow, SessionRow};
use super::{Answer, Behavior, PutMode, Reply, Request, SessionSpec, SESSION_TTL_MULTIPLIER};
use crate::model::{duration_ms, DbTime, Effect, Op, Purpose};
use std::time::Duration;

/// A key's lock is how Consul's leader-election guide elects a leader: its lease records and
/// announces every acquisition and release, as an election's does.
const KEY_LOCK: Purpose = Purpose::Election;

/// How long a deleted key's tombstone keeps a prefix's index from sliding back (Consul's
/// default `tombstone_ttl`).
const TOMBSTONE_TTL_MS: u64 = 15 * 60 * 1000;

/// The index a writing request gives every row it changes: one more than the store's (or, the
/// first write of a new epoch of the database, the epoch's floor: a promoted replica's indexes
/// lie above every index the old primary handed out, lost ones included), taken the first time
/// something changes; and which of Consul's tables (keys, sessions) changed, so that their
/// table indexes move with it.
struct Writes {
    next: u64,
    kvs: bool,
    sessions: bool,
}

impl Writes {
    /// The index of a change to a key.
    fn kv(&mut self) -> u64 {
        self.kvs = true;
        self.next
    }

    /// The index of a session created or ended.
    fn session(&mut self) -> u64 {
        self.sessions = true;
        self.next
    }

    fn changed(&self) -> bool {
        self.kvs || self.sessions
    }
}

/// What [`run`] did.
pub(crate) enum Ran {
    /// The request's answer.
    Answered(Answer),
    /// A read found what changed without a write (a lock a key no longer has, a session whose
    /// time ran out): its answer would differ from the last answer at the same index. The
    /// caller settles it first ([`Request::Reap`], which writes and so moves the index) and
    /// reads again; the answer is what the read saw, for a caller that cannot.
    Unsettled(Answer),
}

/// Runs `request` in `tx` (the caller commits). `actor` goes into the lease history.
pub(crate) async fn run(tx: &mut ConsulTx<'_>, request: &Request, actor: &str) -> Result<Ran> {
    if !request.writes() {
        let store_index = tx.read_index().await?;
        let now = tx.now().await?;
        let (reply, unsettled) = read(tx, request, now).await?;
        let index = answer_index(tx, request, &reply, store_index).await?;
        let answer = Answer {
            index,
            store_index,
            now,
            reply,
        };
        return Ok(if unsettled {
            Ran::Unsettled(answer)
        } else {
            Ran::Answered(answer)
        });
    }
    let before = tx.lock_index().await?;
    let now = tx.now().await?;
    let next = (before + 1).max(tx.epoch_floor().await?);
    let mut w = Writes {
        next,
        kvs: false,
        sessions: false,
    };
    let reply = write(tx, request, now, &mut w, actor).await?;
    let index = if w.changed() {
        tx.set_index(next).await?;
        tx.set_table_indexes(next, w.kvs, w.sessions).await?;
        tx.notify().await?;
        next
    } else {
        before
    };
    Ok(Ran::Answered(Answer {
        index,
        store_index: index,
        now,
        reply,
    }))
}

/// The index a read answers with, as Consul's blocking queries compute it (at least 1): one
/// key's `ModifyIndex`, or the keys' table index when it is missing; a prefix's highest
/// `ModifyIndex` among its keys and the tombstones of its deleted keys (the keys' table index
/// for the empty prefix, or when it never had a key); the sessions' table index for sessions;
/// the store's for the index itself. A blocking query waits until its answer's index passes
/// the one it was given, so it wakes when what it reads changes, not when anything does.
async fn answer_index(
    tx: &mut ConsulTx<'_>,
    request: &Request,
    reply: &Reply,
    store_index: u64,
) -> Result<u64> {
    let index = match (request, reply) {
        (Request::Get { recurse: false, .. }, Reply::Entries(entries)) => match entries.first() {
            Some(entry) => entry.modify_index,
            None => tx.kvs_index().await?,
        },
        (Request::Get { key, recurse: true }, Reply::Entries(entries)) => {
            let under = if key.is_empty() {
                0
            } else {
                let highest = entries.iter().map(|e| e.modify_index).max().unwrap_or(0);
                highest.max(tx.tombstones_under(key).await?)
            };
            match under {
                0 => tx.kvs_index().await?,
                under => under,
            }
        }
        (Request::Session(_) | Request::Sessions(_), _) => tx.sessions_index().await?,
        _ => store_index,
    };
    Ok(index.max(1))
}

/// A read's reply, and whether what it shows is unsettled (see [`Ran::Unsettled`]).
async fn read(tx: &mut ConsulTx<'_>, request: &Request, now: DbTime) -> Result<(Reply, bool)> {
    let ended = |s: &SessionRow| s.expires_at <= now;
    Ok(match request {
        Request::Session(id) => {
            let row = tx.session(id).await?;
            let unsettled = row.as_ref().is_some_and(ended);
            let shown = row.filter(|s| !ended(s)).map(|s| s.shown());
            (Reply::Session(shown), unsettled)
        }
        Request::Sessions(node) => {
            let rows = tx.sessions(node.as_deref()).await?;
            let unsettled = rows.iter().any(ended);
            let shown = rows.iter().filter(|s| !ended(s)).map(|s| s.shown());
            (Reply::Sessions(shown.collect()), unsettled)
        }
        Request::Get { key, recurse } => {
            let rows = tx.entries(key, *recurse).await?;
            let unsettled = rows.iter().any(|e| e.stale(now));
            let shown = rows.iter().map(|e| e.shown(now)).collect();
            (Reply::Entries(shown), unsettled)
        }
        Request::Index => {
            // The index blocking queries wait on: it must move before any key's answer does.
            let stale = tx.locked_entries().await?.iter().any(|e| e.stale(now));
            let expired = !tx.expired_sessions(now, 1).await?.is_empty();
            (Reply::Index, stale || expired)
        }
        _ => unreachable!("a writing request"),
    })
}

async fn write(
    tx: &mut ConsulTx<'_>,
    request: &Request,
    now: DbTime,
    w: &mut Writes,
    actor: &str,
) -> Result<Reply> {
    match request {
        Request::CreateSession {
            id,
            spec,
            node_lease,
        } => create(tx, now, w, id, spec, *node_lease).await,
        Request::RenewSession(id) => {
            let Some(row) = tx.session(id).await?.filter(|s| s.expires_at > now) else {
                return Ok(Reply::Session(None));
            };
            let renewed = renew(tx, now, w, row, None, actor).await?;
            Ok(Reply::Session(Some(renewed.shown())))
        }
        Request::DestroySession(id) => {
            if let Some(row) = tx.session(id).await? {
                // A session that expired unnoticed ended then, not now.
                let ended = row.expires_at.min(now);
                end_session(tx, now, w, &row, ended, "destroyed", actor).await?;
            }
            Ok(Reply::Done(true))
        }
        Request::Heartbeat { node, lease } => {
            for row in tx.sessions(Some(node)).await? {
                if row.ttl_ms.is_none() && row.expires_at > now {
                    renew(tx, now, w, row, Some(duration_ms(*lease)), actor).await?;
                }
            }
            Ok(Reply::Done(true))
        }
        Request::Reap { limit } => {
            let expired = tx.expired_sessions(now, *limit).await?;
            for row in &expired {
                end_session(tx, now, w, row, row.expires_at, "expired", actor).await?;
            }
            for mut entry in tx.locked_entries().await? {
                settle(tx, now, w, &mut entry, actor).await?;
            }
            tx.reap_tombstones(now.minus_ms(TOMBSTONE_TTL_MS)).await?;
            Ok(Reply::Reaped(expired.len()))
        }
        Request::Put {
            key,
            value,
            flags,
            mode,
        } => put(tx, now, w, key, value, *flags, mode, actor).await,
        Request::Delete { key, recurse, cas } => {
            delete(tx, now, w, key, *recurse, *cas, actor).await
        }
        _ => unreachable!("a reading request"),
    }
}

async fn create(
    tx: &mut ConsulTx<'_>,
    now: DbTime,
    w: &mut Writes,
    id: &str,
    spec: &SessionSpec,
    node_lease: Duration,
) -> Result<Reply> {
    let ttl_ms = spec.ttl.map(duration_ms);
    // As Consul: a TTL session ends twice its TTL after its last renewal (a client such as
    // Patroni halves the TTL it asks for because of it, and believes its lock for the whole).
    let lease_ms = ttl_ms.map_or_else(
        || duration_ms(node_lease),
        |ttl| ttl.saturating_mul(SESSION_TTL_MULTIPLIER),
    );
    let index = w.session();
    let row = SessionRow {
        id: id.to_string(),
        name: spec.name.clone(),
        node: spec.node.clone(),
        ttl_ms,
        lease_ms,
        lock_delay_ms: duration_ms(spec.lock_delay),
        behavior: spec.behavior,
        create_index: index,
        modify_index: index,
        expires_at: now.plus_ms(lease_ms),
    };
    tx.insert_session(&row).await?;
    Ok(Reply::Session(Some(row.shown())))
}

/// Renews a live session by `lease_ms` (default its own) and each lock it holds to the same
/// instant; a lock its lease no longer is (demoted, paused, handed over, taken) is let go.
async fn renew(
    tx: &mut ConsulTx<'_>,
    now: DbTime,
    w: &mut Writes,
    mut row: SessionRow,
    lease_ms: Option<u64>,
    actor: &str,
) -> Result<SessionRow> {
    if let Some(ms) = lease_ms {
        row.lease_ms = ms;
    }
    row.expires_at = now.plus_ms(row.lease_ms);
    for mut entry in tx.entries_of(&row.id).await? {
        let kept = if entry.live_lock(now).is_some() {
            let op = Op::Campaign {
                candidate: row.id.clone(),
                term: Some(entry.lock_index),
                ttl_ms: row.lease_ms,
                metadata: metadata(&entry.value),
                purpose: KEY_LOCK,
            };
            match tx.lease(&entry.key, &op, actor).await?.effect {
                Effect::Renewed => true,
                Effect::SteppedDown(reason) => {
                    let why = format!("session {} told to step down: {reason:?}", row.id);
                    release(tx, &entry, &row.id, now, Some(why), actor).await?;
                    false
                }
                _ => false,
            }
        } else {
            false
        };
        if !kept {
            entry.session = None;
            entry.modify_index = w.kv();
            tx.update_entry(&entry).await?;
        }
    }
    tx.update_session(&row).await?;
    Ok(row)
}

/// Ends a session that ended at `ended`: each lock it held is released so that nobody takes
/// it before `ended` + its lock-delay (or its key deleted, for `Behavior::Delete`).
async fn end_session(
    tx: &mut ConsulTx<'_>,
    now: DbTime,
    w: &mut Writes,
    row: &SessionRow,
    ended: DbTime,
    how: &str,
    actor: &str,
) -> Result<()> {
    let until = ended.plus_ms(row.lock_delay_ms);
    for mut entry in tx.entries_of(&row.id).await? {
        let why = format!(
            "session {} {how}; lock-delay {} ms",
            row.id, row.lock_delay_ms
        );
        release(tx, &entry, &row.id, until, Some(why), actor).await?;
        match row.behavior {
            Behavior::Delete => {
                tx.delete_entry(&entry.key).await?;
                tx.tombstone(&entry.key, w.kv(), now).await?;
            }
            Behavior::Release => {
                entry.session = None;
                entry.modify_index = w.kv();
                tx.update_entry(&entry).await?;
            }
        }
    }
    tx.delete_session(&row.id).await?;
    w.session();
    Ok(())
}

/// Releases the lease of `entry`'s key if `session` holds it with the entry's lock index, so
/// that nobody takes it before `until` (the model never touches a successor's lease).
async fn release(
    tx: &mut ConsulTx<'_>,
    entry: &EntryRow,
    session: &str,
    until: DbTime,
    reason: Option<String>,
    actor: &str,
) -> Result<()> {
    let Some(lease) = &entry.lease else {
        return Ok(());
    };
    let at_least_us = until.0.saturating_sub(lease.acquired_at.0).max(0);
    let op = Op::Release {
        candidate: session.to_string(),
        term: entry.lock_index,
        at_least_ms: u64::try_from(at_least_us).unwrap_or(0).div_ceil(1000),
        reason,
        purpose: KEY_LOCK,
    };
    tx.lease(&entry.key, &op, actor).await?;
    Ok(())
}

/// A value shown as the lease's metadata (the holder's "body") when it is short UTF-8 text.
fn metadata(value: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(value).ok()?;
    (!text.is_empty() && crate::validate::metadata(text).is_ok()).then(|| text.to_string())
}

#[allow(clippy::too_many_arguments)]
async fn put(
    tx: &mut ConsulTx<'_>,
    now: DbTime,
    w: &mut Writes,
    key: &str,
    value: &[u8],
    flags: u64,
    mode: &PutMode,
    actor: &str,
) -> Result<Reply> {
    let mut current = tx.entries(key, false).await?.into_iter().next();
    if let Some(settled) = &mut current {
        settle(tx, now, w, settled, actor).await?;
    }
    let mut entry = current.clone().unwrap_or_else(|| EntryRow {
        key: key.to_string(),
        value: Vec::new(),
        flags: 0,
        session: None,
        lock_index: 0,
        create_index: 0,
        modify_index: 0,
        lease: None,
    });
    let done = match mode {
        PutMode::Set { cas } => match (cas, &current) {
            (Some(0), Some(_)) => false,
            (Some(cas), Some(e)) if *cas != 0 && e.modify_index != *cas => false,
            (Some(cas), None) if *cas != 0 => false,
            _ => true,
        },
        PutMode::Release(session) => {
            // As an acquire: only a live session that still holds the key's lock now.
            let live = tx
                .session(session)
                .await?
                .is_some_and(|s| s.expires_at > now);
            if live && entry.live_lock(now) == Some(session.as_str()) {
                release(tx, &entry, session, now, None, actor).await?;
                entry.session = None;
                true
            } else {
                false
            }
        }
        PutMode::Acquire(session) => {
            let Some(owner) = tx.session(session).await?.filter(|s| s.expires_at > now) else {
                return Err(Error::InvalidSession(session.clone()));
            };
            if entry.live_lock(now) == Some(session.as_str()) {
                true
            } else if let Some(rule) = tx.refusal(key, now).await? {
                // Consul's answer to an acquire it cannot grant (as for a lock-delay), with
                // tenure's reason beside it.
                tracing::warn!(key, session, rule, "consul: refusing to lock a key");
                return Ok(Reply::Refused(format!("{key:?} {rule}")));
            } else {
                let op = Op::Campaign {
                    candidate: session.clone(),
                    term: None,
                    // The lease ends with the session, at the same instant.
                    ttl_ms: owner.expires_at.ms_since(now).max(1),
                    metadata: metadata(value),
                    purpose: KEY_LOCK,
                };
                let applied = tx.lease(key, &op, actor).await?;
                match (&applied.effect, &applied.lease) {
                    (Effect::Acquired { .. }, Some(lease)) => {
                        entry.session = Some(session.clone());
                        entry.lock_index = lease.term;
                        true
                    }
                    _ => false,
                }
            }
        }
    };
    if !done {
        return Ok(Reply::Done(false));
    }
    entry.value = value.to_vec();
    entry.flags = flags;
    if current.as_ref().is_some_and(|c| c.same_as(&entry)) {
        // As Consul: a write that changes nothing (a holder acquiring its own lock again with
        // the same value, a set to the value it has) succeeds without moving the key's index,
        // so nobody blocked on the key wakes.
        return Ok(Reply::Done(true));
    }
    let index = w.kv();
    entry.modify_index = index;
    if current.is_some() {
        tx.update_entry(&entry).await?;
    } else {
        entry.create_index = index;
        tx.insert_entry(&entry).await?;
    }
    Ok(Reply::Done(true))
}

/// Settles a stale `entry` (see [`EntryRow::stale`]) in place and in its row: the row forgets
/// the session at a new `ModifyIndex`. If that session's lease merely expired (the session ran
/// out and was not reaped yet), it is released first, so that nobody takes the key before the
/// session's end plus its lock-delay. Returns whether the entry was stale.
async fn settle(
    tx: &mut ConsulTx<'_>,
    now: DbTime,
    w: &mut Writes,
    entry: &mut EntryRow,
    actor: &str,
) -> Result<bool> {
    let Some(old) = entry.session.clone().filter(|_| entry.stale(now)) else {
        return Ok(false);
    };
    if let Some(lease) = &entry.lease {
        if lease.holder.as_deref() == Some(old.as_str()) && lease.term == entry.lock_index {
            // The lock-delay counts from the session's end (its lease ends up to a
            // millisecond earlier: its ttl is whole milliseconds).
            let (ended, delay) = match tx.session(&old).await? {
                Some(s) => (s.expires_at.max(lease.expires_at), s.lock_delay_ms),
                None => (lease.expires_at, 0),
            };
            let until = ended.plus_ms(delay);
            let why = format!("session {old} expired; lock-delay {delay} ms");
            release(tx, entry, &old, until, Some(why), actor).await?;
        }
    }
    entry.session = None;
    entry.modify_index = w.kv();
    tx.update_entry(entry).await?;
    Ok(true)
}

async fn delete(
    tx: &mut ConsulTx<'_>,
    now: DbTime,
    w: &mut Writes,
    key: &str,
    recurse: bool,
    cas: Option<u64>,
    actor: &str,
) -> Result<Reply> {
    let mut entries = tx.entries(key, recurse).await?;
    for entry in &mut entries {
        // Its lock-delay outlives the key, as in Consul; and a CAS sees the settled index.
        settle(tx, now, w, entry, actor).await?;
    }
    if let (false, Some(cas)) = (recurse, cas) {
        match entries.first() {
            Some(e) if cas != 0 && e.modify_index == cas => {}
            _ => return Ok(Reply::Done(false)),
        }
    }
    for entry in &entries {
        if let Some(session) = entry.live_lock(now) {
            let session = session.to_string();
            let why = Some(format!("key deleted while session {session} held it"));
            release(tx, entry, &session, now, why, actor).await?;
        }
        tx.delete_entry(&entry.key).await?;
        tx.tombstone(&entry.key, w.kv(), now).await?;
    }
    Ok(Reply::Done(true))
}
