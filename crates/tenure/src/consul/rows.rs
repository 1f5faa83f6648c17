//! [`ConsulTx`]: the Consul rows of one transaction — sessions, keys and the index — read and
//! written through the store's seam (`backend/tx.rs`), with checked conversions between the
//! rows' `BIGINT`s and the layer's unsigned counters.

use super::statements::{prefix_end, Statements};
use super::{Behavior, Entry, Session};
use crate::backend::tx::int::{self, bigint as int, bits, from_bits};
use crate::backend::tx::{Arg, Row, Topic, Tx};
use crate::error::Result;
use crate::model::{DbTime, Op};
use crate::records::Applied;
use std::time::Duration;

/// A session row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SessionRow {
    pub id: String,
    pub name: String,
    pub node: String,
    /// Consul's TTL; `None`: lives with its node.
    pub ttl_ms: Option<u64>,
    /// How long it lives past each renewal (its TTL, or its node's lease).
    pub lease_ms: u64,
    pub lock_delay_ms: u64,
    pub behavior: Behavior,
    pub create_index: u64,
    pub modify_index: u64,
    pub expires_at: DbTime,
}

/// A key's row, with the state of the key's lease read beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EntryRow {
    pub key: String,
    pub value: Vec<u8>,
    pub flags: u64,
    /// The session that took the lock through the KV API, if it has not let go of it here.
    pub session: Option<String>,
    pub lock_index: u64,
    pub create_index: u64,
    pub modify_index: u64,
    /// The lease of the same name: holder, term, acquired, expires (`None`: no lease row).
    pub lease: Option<LeaseState>,
}

/// The part of a lease row the Consul rules read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LeaseState {
    pub holder: Option<String>,
    pub term: u64,
    pub acquired_at: DbTime,
    pub expires_at: DbTime,
}

impl EntryRow {
    /// Whether `other` would store what this row stores (Consul's `DirEntry.Equal`: value,
    /// flags, session and lock index): then a write of it changes nothing.
    pub(super) fn same_as(&self, other: &EntryRow) -> bool {
        self.key == other.key
            && self.value == other.value
            && self.flags == other.flags
            && self.session == other.session
            && self.lock_index == other.lock_index
    }

    /// The session whose lock this entry records, if the key's lease still is that lock:
    /// held by it, with that term, not expired.
    pub(super) fn live_lock(&self, now: DbTime) -> Option<&str> {
        let session = self.session.as_deref()?;
        let lease = self.lease.as_ref()?;
        (lease.holder.as_deref() == Some(session)
            && lease.term == self.lock_index
            && lease.expires_at > now)
            .then_some(session)
    }

    /// Whether the row still names a session whose lock the key's lease no longer is (the
    /// session ended, or tenure demoted, handed over or gave the lease to someone else): its
    /// answer changed without a write. No read answers such a key before it is settled
    /// (`rules::settle`), which gives it a new `ModifyIndex` and moves the index.
    pub(super) fn stale(&self, now: DbTime) -> bool {
        self.session.is_some() && self.live_lock(now).is_none()
    }

    pub(super) fn shown(&self, now: DbTime) -> Entry {
        Entry {
            key: self.key.clone(),
            value: self.value.clone(),
            flags: self.flags,
            session: self.live_lock(now).map(str::to_string),
            lock_index: self.lock_index,
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }
}

impl SessionRow {
    pub(super) fn shown(&self) -> Session {
        Session {
            id: self.id.clone(),
            name: self.name.clone(),
            node: self.node.clone(),
            ttl: self.ttl_ms.map(Duration::from_millis),
            lock_delay: Duration::from_millis(self.lock_delay_ms),
            behavior: self.behavior,
            create_index: self.create_index,
            modify_index: self.modify_index,
            expires_at: self.expires_at,
        }
    }
}

/// The reads and writes of one transaction. Reads see the rows as they are in the transaction;
/// writers are serialized by [`lock_index`](ConsulTx::lock_index), which every writing request
/// calls first.
pub(crate) struct ConsulTx<'t> {
    tx: &'t mut dyn Tx,
    s: &'t Statements,
}

/// A stored counter or duration of the Consul tables, read back unsigned.
fn unsigned(v: i64) -> Result<u64> {
    int::unsigned("consul", "counter", v)
}

fn session_row(row: &dyn Row) -> Result<SessionRow> {
    let behavior = row.text("behavior")?;
    Ok(SessionRow {
        id: row.text("id")?,
        name: row.text("name")?,
        node: row.text("node")?,
        ttl_ms: row.opt_int("ttl_ms")?.map(unsigned).transpose()?,
        lease_ms: unsigned(row.int("lease_ms")?)?,
        lock_delay_ms: unsigned(row.int("lock_delay_ms")?)?,
        behavior: Behavior::parse(&behavior).unwrap_or(Behavior::Release),
        create_index: unsigned(row.int("create_index")?)?,
        modify_index: unsigned(row.int("modify_index")?)?,
        expires_at: DbTime(row.int("expires_us")?),
    })
}

fn entry_row(row: &dyn Row) -> Result<EntryRow> {
    let lease = match row.opt_int("l_term")? {
        Some(term) => Some(LeaseState {
            holder: row.opt_text("l_holder")?,
            term: unsigned(term)?,
            acquired_at: DbTime(row.int("l_acquired_us")?),
            expires_at: DbTime(row.int("l_expires_us")?),
        }),
        None => None,
    };
    Ok(EntryRow {
        key: row.text("kv_key")?,
        value: row.bytes("value")?,
        flags: from_bits(row.int("flags")?),
        session: row.opt_text("session")?,
        lock_index: unsigned(row.int("lock_index")?)?,
        create_index: unsigned(row.int("create_index")?)?,
        modify_index: unsigned(row.int("modify_index")?)?,
        lease,
    })
}

fn entries(rows: &[Box<dyn Row>]) -> Result<Vec<EntryRow>> {
    rows.iter().map(|row| entry_row(row.as_ref())).collect()
}

fn sessions(rows: &[Box<dyn Row>]) -> Result<Vec<SessionRow>> {
    rows.iter().map(|row| session_row(row.as_ref())).collect()
}

impl<'t> ConsulTx<'t> {
    pub(crate) fn new(tx: &'t mut dyn Tx, s: &'t Statements) -> ConsulTx<'t> {
        ConsulTx { tx, s }
    }

    /// The database clock, read once per transaction (after the index lock, for writers).
    pub(crate) async fn now(&mut self) -> Result<DbTime> {
        self.tx.now().await
    }

    /// The floor of the epoch a writer's transaction writes in (read with its clock): the
    /// lowest index the epoch hands out ([`Tx::epoch`](crate::backend::tx::Tx::epoch)).
    pub(crate) async fn epoch_floor(&mut self) -> Result<u64> {
        Ok(self.tx.epoch().await?.floor())
    }

    /// Locks the index row until the end of the transaction and reads it (0 if new).
    pub(crate) async fn lock_index(&mut self) -> Result<u64> {
        self.s.index.lock(self.tx).await
    }

    /// Reads the index without locking.
    pub(crate) async fn read_index(&mut self) -> Result<u64> {
        self.s.index.read(self.tx).await
    }

    pub(crate) async fn set_index(&mut self, index: u64) -> Result<()> {
        self.s.index.set(self.tx, index).await
    }

    /// The keys' table index: the last index that changed a key (deletes included).
    pub(crate) async fn kvs_index(&mut self) -> Result<u64> {
        self.s.kvs_index.read(self.tx).await
    }

    /// The sessions' table index: the last index that created or ended a session.
    pub(crate) async fn sessions_index(&mut self) -> Result<u64> {
        self.s.sessions_index.read(self.tx).await
    }

    /// Records `index` as the last change of the keys (`kvs`) and/or of the sessions, in a
    /// writer's transaction (after [`lock_index`](ConsulTx::lock_index)).
    pub(crate) async fn set_table_indexes(
        &mut self,
        index: u64,
        kvs: bool,
        sessions: bool,
    ) -> Result<()> {
        for (changed, counter) in [(kvs, &self.s.kvs_index), (sessions, &self.s.sessions_index)] {
            if changed {
                counter.lock(self.tx).await?;
                counter.set(self.tx, index).await?;
            }
        }
        Ok(())
    }

    /// Marks `key` deleted at `index` (its tombstone replaces an older one).
    pub(crate) async fn tombstone(&mut self, key: &str, index: u64, now: DbTime) -> Result<()> {
        self.tx
            .execute(&self.s.delete_tombstone, &[Arg::Text(key)])
            .await?;
        let args = [
            Arg::Text(key),
            Arg::Int(int("index", index)?),
            Arg::Int(now.0),
        ];
        self.tx.execute(&self.s.insert_tombstone, &args).await
    }

    /// The highest tombstone index of the keys that start with `prefix` (0 if none).
    pub(crate) async fn tombstones_under(&mut self, prefix: &str) -> Result<u64> {
        let rows = match prefix_end(prefix) {
            Some(end) => {
                let args = [Arg::Text(prefix), Arg::Text(&end)];
                self.tx.fetch(&self.s.tombstones_between, &args).await?
            }
            None => {
                self.tx
                    .fetch(&self.s.tombstones_from, &[Arg::Text(prefix)])
                    .await?
            }
        };
        let mut highest = 0;
        for row in &rows {
            // The range is only a bound for the index: the prefix test is this one.
            if row.text("kv_key")?.starts_with(prefix) {
                highest = highest.max(unsigned(row.int("tomb_index")?)?);
            }
        }
        Ok(highest)
    }

    /// Forgets the tombstones of keys deleted before `before`.
    pub(crate) async fn reap_tombstones(&mut self, before: DbTime) -> Result<()> {
        self.tx
            .execute(&self.s.reap_tombstones, &[Arg::Int(before.0)])
            .await
    }

    /// One session row, expired or not.
    pub(crate) async fn session(&mut self, id: &str) -> Result<Option<SessionRow>> {
        let rows = self.tx.fetch(&self.s.session, &[Arg::Text(id)]).await?;
        rows.first()
            .map(|row| session_row(row.as_ref()))
            .transpose()
    }

    /// Every session row (of one node), expired or not, oldest first.
    pub(crate) async fn sessions(&mut self, node: Option<&str>) -> Result<Vec<SessionRow>> {
        let rows = match node {
            Some(node) => {
                let args = [Arg::Text(node)];
                self.tx.fetch(&self.s.sessions_of_node, &args).await?
            }
            None => self.tx.fetch(&self.s.sessions, &[]).await?,
        };
        sessions(&rows)
    }

    /// Up to `limit` sessions whose `expires_at` has passed `now`, earliest first.
    pub(crate) async fn expired_sessions(
        &mut self,
        now: DbTime,
        limit: u32,
    ) -> Result<Vec<SessionRow>> {
        let sql = format!("{} LIMIT {limit}", self.s.expired_sessions);
        let rows = self.tx.fetch(&sql, &[Arg::Int(now.0)]).await?;
        sessions(&rows)
    }

    pub(crate) async fn insert_session(&mut self, s: &SessionRow) -> Result<()> {
        let ttl_ms = s.ttl_ms.map(|v| int("ttl", v)).transpose()?;
        let args = [
            Arg::Text(&s.id),
            Arg::Text(&s.name),
            Arg::Text(&s.node),
            Arg::OptInt(ttl_ms),
            Arg::Int(int("lease", s.lease_ms)?),
            Arg::Int(int("lock delay", s.lock_delay_ms)?),
            Arg::Text(s.behavior.as_str()),
            Arg::Int(int("index", s.create_index)?),
            Arg::Int(int("index", s.modify_index)?),
            Arg::Int(s.expires_at.0),
        ];
        self.tx.execute(&self.s.insert_session, &args).await
    }

    pub(crate) async fn update_session(&mut self, s: &SessionRow) -> Result<()> {
        let args = [
            Arg::Int(int("lease", s.lease_ms)?),
            Arg::Int(int("index", s.modify_index)?),
            Arg::Int(s.expires_at.0),
            Arg::Text(&s.id),
        ];
        self.tx.execute(&self.s.update_session, &args).await
    }

    pub(crate) async fn delete_session(&mut self, id: &str) -> Result<()> {
        self.tx
            .execute(&self.s.delete_session, &[Arg::Text(id)])
            .await
    }

    /// One key (`prefix == false`) or every key that starts with `key`, sorted.
    pub(crate) async fn entries(&mut self, key: &str, prefix: bool) -> Result<Vec<EntryRow>> {
        let rows = if !prefix {
            self.tx.fetch(&self.s.entry, &[Arg::Text(key)]).await?
        } else {
            match prefix_end(key) {
                Some(end) => {
                    let args = [Arg::Text(key), Arg::Text(&end)];
                    self.tx.fetch(&self.s.entries_between, &args).await?
                }
                None => {
                    self.tx
                        .fetch(&self.s.entries_from, &[Arg::Text(key)])
                        .await?
                }
            }
        };
        let mut found = entries(&rows)?;
        // The range is only a bound for the index: the prefix test is this one.
        found.retain(|e| {
            if prefix {
                e.key.starts_with(key)
            } else {
                e.key == key
            }
        });
        Ok(found)
    }

    /// The keys whose lock `session` took.
    pub(crate) async fn entries_of(&mut self, session: &str) -> Result<Vec<EntryRow>> {
        let rows = self
            .tx
            .fetch(&self.s.entries_of, &[Arg::Text(session)])
            .await?;
        entries(&rows)
    }

    /// Every key whose row names a session (a lock taken through the KV API, live or not).
    pub(crate) async fn locked_entries(&mut self) -> Result<Vec<EntryRow>> {
        let rows = self.tx.fetch(&self.s.locked_entries, &[]).await?;
        entries(&rows)
    }

    pub(crate) async fn insert_entry(&mut self, e: &EntryRow) -> Result<()> {
        let args = [
            Arg::Text(&e.key),
            Arg::Bytes(&e.value),
            Arg::Int(bits(e.flags)),
            Arg::OptText(e.session.as_deref()),
            Arg::Int(int("lock index", e.lock_index)?),
            Arg::Int(int("index", e.create_index)?),
            Arg::Int(int("index", e.modify_index)?),
        ];
        self.tx.execute(&self.s.insert_entry, &args).await
    }

    pub(crate) async fn update_entry(&mut self, e: &EntryRow) -> Result<()> {
        let args = [
            Arg::Bytes(&e.value),
            Arg::Int(bits(e.flags)),
            Arg::OptText(e.session.as_deref()),
            Arg::Int(int("lock index", e.lock_index)?),
            Arg::Int(int("index", e.create_index)?),
            Arg::Int(int("index", e.modify_index)?),
            Arg::Text(&e.key),
        ];
        self.tx.execute(&self.s.update_entry, &args).await
    }

    pub(crate) async fn delete_entry(&mut self, key: &str) -> Result<()> {
        self.tx
            .execute(&self.s.delete_entry, &[Arg::Text(key)])
            .await
    }

    /// The lease operation, decided by the model under the lease row's lock, in this
    /// transaction (with its history event), at the request's one instant: a lock renewed
    /// with its session ends with it.
    pub(crate) async fn lease(&mut self, name: &str, op: &Op, actor: &str) -> Result<Applied> {
        self.tx.now().await?;
        self.tx.lease(name, op, actor, None).await
    }

    /// Why a session may not take the lease `name` at `now`, if it may not: the one rule for
    /// names of a lease taken for someone who is not a spreading group's member (a live
    /// group's name or shard), checked in this transaction.
    pub(crate) async fn refusal(
        &mut self,
        name: &str,
        now: DbTime,
    ) -> Result<Option<&'static str>> {
        crate::spread::refusal_in(self.tx, name, now).await
    }

    /// Wakes the blocking queries of other instances at commit, where the engine can push.
    pub(crate) async fn notify(&mut self) -> Result<()> {
        self.tx.notify(Topic::Layer(super::TOPIC)).await
    }
}
