//! [`EtcdTx`]: the etcd rows of one transaction — keys, the log, leases, members, the revision
//! and the compaction floor — read and written through the store's seam, with checked
//! conversions between the layer's numbers and the rows' `BIGINT`s.

use super::proto::mvccpb::event::EventType;
use super::proto::mvccpb::{Event, KeyValue};
use super::rules::span::Span;
use super::statements::{Signalling, Statements};
use crate::backend::tx::int::{bigint, bits, from_bits, unsigned};
use crate::backend::tx::{Arg, Row, Topic, Tx};
use crate::error::Result;
use crate::model::DbTime;
use std::collections::HashMap;

/// A lease row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeaseRow {
    pub id: i64,
    pub ttl: i64,
    pub granted_at: DbTime,
    pub expires_at: DbTime,
}

/// A member row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MemberRow {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub started_at: DbTime,
    pub expires_at: DbTime,
}

/// The etcd rows of one transaction. A writer takes the revision first
/// ([`bump_revision`](EtcdTx::bump_revision)), which serializes every writer of keys.
///
/// It remembers the single keys it read or wrote ([`kv`](EtcdTx::kv), a one-key
/// [`kvs`](EtcdTx::kvs)): a Txn's compare, its Put's check and the Put itself read a key once.
/// Every write of a key goes through it ([`record`](EtcdTx::record)), and a writer holds the
/// revision, which every other writer of keys takes first, so what it remembers is what the
/// database holds for it.
pub(crate) struct EtcdTx<'t> {
    pub(super) tx: &'t mut dyn Tx,
    pub(super) s: &'t Statements,
    known: HashMap<Vec<u8>, Option<KeyValue>>,
    /// Whether the layer's change signal is sent (at commit) already.
    signalled: bool,
}

fn kv_row(row: &dyn Row) -> Result<KeyValue> {
    Ok(KeyValue {
        key: row.bytes("kv_key")?,
        value: row.bytes("value")?,
        create_revision: row.int("create_revision")?,
        mod_revision: row.int("mod_revision")?,
        version: row.int("version")?,
        lease: row.int("lease")?,
    })
}

fn event_row(row: &dyn Row) -> Result<Event> {
    let key = row.bytes("kv_key")?;
    let revision = row.int("revision")?;
    let prev = (row.int("prev_version")? != 0)
        .then(|| -> Result<KeyValue> {
            Ok(KeyValue {
                key: key.clone(),
                value: row.bytes("prev_value")?,
                create_revision: row.int("prev_create_revision")?,
                mod_revision: row.int("prev_mod_revision")?,
                version: row.int("prev_version")?,
                lease: row.int("prev_lease")?,
            })
        })
        .transpose()?;
    let kind = row.int("kind")?;
    let kv = if kind == EventType::Delete as i64 {
        KeyValue {
            key,
            mod_revision: revision,
            ..KeyValue::default()
        }
    } else {
        KeyValue {
            key,
            value: row.bytes("value")?,
            create_revision: row.int("create_revision")?,
            mod_revision: revision,
            version: row.int("version")?,
            lease: row.int("lease")?,
        }
    };
    Ok(Event {
        r#type: if kind == EventType::Delete as i64 {
            EventType::Delete as i32
        } else {
            EventType::Put as i32
        },
        kv: Some(kv),
        prev_kv: prev,
    })
}

fn lease_row(row: &dyn Row) -> Result<LeaseRow> {
    Ok(LeaseRow {
        id: row.int("id")?,
        ttl: row.int("ttl_s")?,
        granted_at: DbTime(row.int("granted_us")?),
        expires_at: DbTime(row.int("expires_us")?),
    })
}

fn urls(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

fn member_row(row: &dyn Row) -> Result<MemberRow> {
    Ok(MemberRow {
        id: from_bits(row.int("id")?),
        name: row.text("name")?,
        peer_urls: urls(&row.text("peer_urls")?),
        client_urls: urls(&row.text("client_urls")?),
        started_at: DbTime(row.int("started_us")?),
        expires_at: DbTime(row.int("expires_us")?),
    })
}

fn all<T>(rows: &[Box<dyn Row>], read: fn(&dyn Row) -> Result<T>) -> Result<Vec<T>> {
    rows.iter().map(|row| read(row.as_ref())).collect()
}

/// A stored counter (a `u64`) as etcd's `int64`.
fn revision(value: u64) -> Result<i64> {
    bigint("revision", value)
}

/// A revision or floor as a counter's value (they are never negative).
fn counter(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// The revision counter holds the revision less one: a new etcd is at revision 1 before its
/// first write, as etcd is (so its first write is at 2, and no key is ever created at 1:
/// etcd's recipes wait for the keys created below their own, `create_revision - 1`, where 0
/// would mean "no bound").
const FIRST_REVISION: i64 = 1;

impl<'t> EtcdTx<'t> {
    pub(crate) fn new(tx: &'t mut dyn Tx, s: &'t Statements) -> EtcdTx<'t> {
        EtcdTx {
            tx,
            s,
            known: HashMap::new(),
            signalled: false,
        }
    }

    /// The database's clock, read once per transaction (after the revision's lock, for
    /// writers).
    pub(crate) async fn now(&mut self) -> Result<DbTime> {
        self.tx.now().await
    }

    /// Locks the revision until the end of the transaction and moves it by one (in one
    /// statement where the engine has `UPDATE … RETURNING`): the revision it found, and the
    /// one this transaction writes at — one above, or, the first write of a new epoch of the
    /// database (a promoted replica), the epoch's floor, above every revision the old primary
    /// handed out, lost ones included.
    pub(crate) async fn bump_revision(&mut self) -> Result<(i64, i64)> {
        let (found, next) = self.s.revision.next_in_epoch(self.tx).await?;
        Ok((
            revision(found)? + FIRST_REVISION,
            revision(next)? + FIRST_REVISION,
        ))
    }

    /// Reads the revision without a lock.
    pub(crate) async fn read_revision(&mut self) -> Result<i64> {
        Ok(revision(self.s.revision.read(self.tx).await?)? + FIRST_REVISION)
    }

    /// Reads the revision with a share lock: no writer commits until this transaction ends.
    pub(crate) async fn share_revision(&mut self) -> Result<i64> {
        let rows = self.tx.fetch(&self.s.revision_shared, &[]).await?;
        let stored = match rows.first() {
            Some(row) => row.int("idx")?,
            None => 0,
        };
        Ok(stored + FIRST_REVISION)
    }

    pub(crate) async fn set_revision(&mut self, value: i64) -> Result<()> {
        self.s
            .revision
            .set(self.tx, counter(value - FIRST_REVISION))
            .await
    }

    pub(crate) async fn read_floor(&mut self) -> Result<i64> {
        revision(self.s.floor.read(self.tx).await?)
    }

    pub(crate) async fn lock_floor(&mut self) -> Result<i64> {
        revision(self.s.floor.lock(self.tx).await?)
    }

    pub(crate) async fn set_floor(&mut self, value: i64) -> Result<()> {
        self.s.floor.set(self.tx, counter(value)).await
    }

    /// The keys of `span` as they are, in key order, at most `limit`.
    pub(crate) async fn kvs(&mut self, span: &Span, limit: Option<usize>) -> Result<Vec<KeyValue>> {
        let one = match span {
            Span::One(key) if limit != Some(0) => Some(key),
            _ => None,
        };
        if let Some(known) = one.and_then(|key| self.known.get(key)) {
            return Ok(known.iter().cloned().collect());
        }
        let Some((sql, args)) = self.s.kvs.pick(span) else {
            return Ok(Vec::new());
        };
        let rows = match limit {
            Some(n) => self.tx.fetch(&format!("{sql} LIMIT {n}"), &args).await?,
            None => self.tx.fetch(sql, &args).await?,
        };
        let kvs = all(&rows, kv_row)?;
        if let Some(key) = one {
            self.known.insert(key.clone(), kvs.first().cloned());
        }
        Ok(kvs)
    }

    /// One key as it is.
    pub(crate) async fn kv(&mut self, key: &[u8]) -> Result<Option<KeyValue>> {
        Ok(self.kvs(&Span::One(key.to_vec()), None).await?.pop())
    }

    /// The bytes the etcd tables take, indexes included.
    pub(crate) async fn size(&mut self) -> Result<i64> {
        let rows = self.tx.fetch(&self.s.size, &[]).await?;
        rows.first().map_or(Ok(0), |row| row.int("n"))
    }

    /// How many keys `span` holds.
    pub(crate) async fn count(&mut self, span: &Span) -> Result<i64> {
        let Some((sql, args)) = self.s.kvs_count.pick(span) else {
            return Ok(0);
        };
        let rows = self.tx.fetch(sql, &args).await?;
        rows.first().map_or(Ok(0), |row| row.int("n"))
    }

    /// The keys attached to `lease`, in key order.
    pub(crate) async fn kvs_of_lease(&mut self, lease: i64) -> Result<Vec<KeyValue>> {
        let rows = self
            .tx
            .fetch(&self.s.kvs_of_lease, &[Arg::Int(lease)])
            .await?;
        all(&rows, kv_row)
    }

    /// Applies `event` to its key's row (a put writes the key as the event's `kv`, updating
    /// the row when the event has a `prev_kv`; a delete removes it) and appends the event
    /// (its revision is its key's `mod_revision`) to the log as the `seq`-th change of its
    /// revision: in one statement where the engine can, else two. The first change of a
    /// transaction also sends the layer's change signal in that statement, where the engine
    /// sends them by statement.
    pub(crate) async fn record(&mut self, event: &Event, seq: i64) -> Result<()> {
        let signal = Topic::Layer(super::TOPIC);
        let payload = signal.encode();
        let empty = KeyValue::default();
        let kv = event.kv.as_ref().unwrap_or(&empty);
        let prev = event.prev_kv.as_ref();
        let deleted = event.r#type == EventType::Delete as i32;
        let numbers = [
            Arg::Int(kv.create_revision),
            Arg::Int(kv.mod_revision),
            Arg::Int(kv.version),
            Arg::Int(kv.lease),
        ];
        let (kv_sql, logged_sql, mut args) = match (deleted, prev) {
            (true, _) => (
                &self.s.delete_kv,
                self.s.logged.as_ref().map(|l| &l.delete),
                vec![Arg::Bytes(&kv.key)],
            ),
            (false, Some(_)) => {
                let mut args = vec![Arg::Bytes(&kv.value)];
                args.extend(numbers);
                args.push(Arg::Bytes(&kv.key));
                let logged = self.s.logged.as_ref().map(|l| &l.update);
                (&self.s.update_kv, logged, args)
            }
            (false, None) => {
                let mut args = vec![Arg::Bytes(&kv.key), Arg::Bytes(&kv.value)];
                args.extend(numbers);
                let logged = self.s.logged.as_ref().map(|l| &l.insert);
                (&self.s.insert_kv, logged, args)
            }
        };
        let prev = prev.unwrap_or(&empty);
        let logged = [
            Arg::Int(kv.mod_revision),
            Arg::Int(seq),
            Arg::Int(i64::from(event.r#type)),
            Arg::Bytes(&kv.key),
            Arg::Bytes(&kv.value),
            Arg::Int(kv.create_revision),
            Arg::Int(kv.version),
            Arg::Int(kv.lease),
            Arg::Bytes(&prev.value),
            Arg::Int(prev.create_revision),
            Arg::Int(prev.mod_revision),
            Arg::Int(prev.version),
            Arg::Int(prev.lease),
        ];
        // Forgotten first: a statement that fails leaves the key unknown, not wrong.
        self.known.remove(&kv.key);
        match logged_sql {
            Some(Signalling {
                signalling: Some(sql),
                ..
            }) if !self.signalled => {
                args.extend(logged);
                args.push(Arg::Text(&payload));
                self.tx.execute(sql, &args).await?;
                self.tx.notified(signal);
                self.signalled = true;
            }
            Some(logged_sql) => {
                args.extend(logged);
                self.tx.execute(&logged_sql.quiet, &args).await?;
            }
            None => {
                self.tx.execute(kv_sql, &args).await?;
                self.tx.execute(&self.s.insert_event, &logged).await?;
            }
        }
        let now = (!deleted).then(|| kv.clone());
        self.known.insert(kv.key.clone(), now);
        Ok(())
    }

    /// The events of `span` after revision `after`, in revision order.
    pub(crate) async fn events_after(&mut self, span: &Span, after: i64) -> Result<Vec<Event>> {
        let Some((sql, keys)) = self.s.events_after.pick(span) else {
            return Ok(Vec::new());
        };
        let mut args = vec![Arg::Int(after)];
        args.extend(keys);
        all(&self.tx.fetch(sql, &args).await?, event_row)
    }

    /// The events of `span` from revision `from` through `through`, in revision order, at
    /// most `limit`.
    pub(crate) async fn events(
        &mut self,
        span: &Span,
        from: i64,
        through: i64,
        limit: Option<usize>,
    ) -> Result<Vec<Event>> {
        let Some((sql, keys)) = self.s.events_between.pick(span) else {
            return Ok(Vec::new());
        };
        let mut args = vec![Arg::Int(from), Arg::Int(through)];
        args.extend(keys);
        let rows = match limit {
            Some(n) => self.tx.fetch(&format!("{sql} LIMIT {n}"), &args).await?,
            None => self.tx.fetch(sql, &args).await?,
        };
        all(&rows, event_row)
    }

    /// Drops the events below revision `floor`.
    pub(crate) async fn drop_events_below(&mut self, floor: i64) -> Result<()> {
        let sql = &self.s.delete_events_below;
        self.tx.execute(sql, &[Arg::Int(floor)]).await
    }

    /// One lease, ended or not; `lock`: locked until the end of the transaction (and read as
    /// last committed, whatever the transaction's snapshot).
    pub(crate) async fn lease(&mut self, id: i64, lock: bool) -> Result<Option<LeaseRow>> {
        let sql = if lock {
            &self.s.lease_locked
        } else {
            &self.s.lease
        };
        let rows = self.tx.fetch(sql, &[Arg::Int(id)]).await?;
        rows.first().map(|r| lease_row(r.as_ref())).transpose()
    }

    /// The leases that live at `now`, earliest end first.
    pub(crate) async fn live_leases(&mut self, now: DbTime) -> Result<Vec<LeaseRow>> {
        let rows = self
            .tx
            .fetch(&self.s.leases_live, &[Arg::Int(now.0)])
            .await?;
        all(&rows, lease_row)
    }

    /// Up to `limit` leases that have ended by `now`, earliest first, locked (`lock`).
    pub(crate) async fn ended_leases(
        &mut self,
        now: DbTime,
        limit: u32,
        lock: bool,
    ) -> Result<Vec<LeaseRow>> {
        let locking = if lock { self.s.for_update } else { "" };
        let sql = format!("{} LIMIT {limit} {locking}", self.s.leases_ended);
        let rows = self.tx.fetch(&sql, &[Arg::Int(now.0)]).await?;
        all(&rows, lease_row)
    }

    pub(crate) async fn insert_lease(&mut self, lease: &LeaseRow) -> Result<()> {
        let args = [
            Arg::Int(lease.id),
            Arg::Int(lease.ttl),
            Arg::Int(lease.granted_at.0),
            Arg::Int(lease.expires_at.0),
        ];
        self.tx.execute(&self.s.insert_lease, &args).await
    }

    pub(crate) async fn delete_lease(&mut self, id: i64) -> Result<()> {
        self.tx.execute(&self.s.delete_lease, &[Arg::Int(id)]).await
    }

    /// Renews each of `ids` that lives at `now` to `now` plus its TTL, in one statement; the
    /// rows of `ids` as they are then.
    pub(crate) async fn renew_leases(&mut self, ids: &[i64], now: DbTime) -> Result<Vec<LeaseRow>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut args = vec![Arg::Int(now.0), Arg::Int(now.0)];
        args.extend(ids.iter().map(|id| Arg::Int(*id)));
        let renew = format!("{}{}", self.s.renew_leases, self.s.in_list(3, ids.len()));
        self.tx.execute(&renew, &args).await?;
        let read = format!("{}{}", self.s.leases_by_id, self.s.in_list(1, ids.len()));
        let rows = self.tx.fetch(&read, &args[2..]).await?;
        all(&rows, lease_row)
    }

    /// Renews each of `ids` that lives at the database's now to now plus its TTL, in one
    /// statement that reads the clock itself; the rows renewed and the revision (`None` for
    /// the revision when none was renewed). `None` where the engine has no `UPDATE …
    /// RETURNING` ([`renew_leases`](EtcdTx::renew_leases) does it there).
    pub(crate) async fn renew_leases_now(
        &mut self,
        ids: &[i64],
    ) -> Result<Option<(Vec<LeaseRow>, Option<i64>)>> {
        let Some(renew) = &self.s.renew_leases_now else {
            return Ok(None);
        };
        let sql = format!("{renew}{}{}", self.s.in_list(1, ids.len()), self.s.renewed);
        let args: Vec<Arg<'_>> = ids.iter().map(|id| Arg::Int(*id)).collect();
        let rows = self.tx.fetch(&sql, &args).await?;
        let revision = match rows.first() {
            // No counter row yet (nothing written): the first revision.
            Some(row) => {
                let stored = row.opt_int("revision_idx")?.unwrap_or(0);
                let stored = unsigned("etcd_revision", "revision", stored)?;
                Some(revision(stored)? + FIRST_REVISION)
            }
            None => None,
        };
        Ok(Some((all(&rows, lease_row)?, revision)))
    }

    /// The members that live at `now`, by id.
    pub(crate) async fn live_members(&mut self, now: DbTime) -> Result<Vec<MemberRow>> {
        let rows = self
            .tx
            .fetch(&self.s.members_live, &[Arg::Int(now.0)])
            .await?;
        all(&rows, member_row)
    }

    /// Writes a member's row (and drops the rows of members that have ended by `now`).
    pub(crate) async fn write_member(&mut self, m: &MemberRow, now: DbTime) -> Result<()> {
        let ended = &self.s.delete_ended_members;
        self.tx.execute(ended, &[Arg::Int(now.0)]).await?;
        let id = bits(m.id);
        let found = self.tx.fetch(&self.s.member, &[Arg::Int(id)]).await?;
        let (peers, clients) = (m.peer_urls.join("\n"), m.client_urls.join("\n"));
        if found.is_empty() {
            let args = [
                Arg::Int(id),
                Arg::Text(&m.name),
                Arg::Text(&peers),
                Arg::Text(&clients),
                Arg::Int(m.started_at.0),
                Arg::Int(m.expires_at.0),
            ];
            self.tx.execute(&self.s.insert_member, &args).await
        } else {
            let args = [
                Arg::Text(&m.name),
                Arg::Text(&peers),
                Arg::Text(&clients),
                Arg::Int(m.started_at.0),
                Arg::Int(m.expires_at.0),
                Arg::Int(id),
            ];
            self.tx.execute(&self.s.update_member, &args).await
        }
    }

    /// Moves a live member's end to `until`; whether it lived at `now`.
    pub(crate) async fn heartbeat_member(
        &mut self,
        id: u64,
        until: DbTime,
        now: DbTime,
    ) -> Result<bool> {
        let args = [Arg::Int(until.0), Arg::Int(bits(id)), Arg::Int(now.0)];
        self.tx.execute(&self.s.heartbeat_member, &args).await?;
        let rows = self.tx.fetch(&self.s.member, &[Arg::Int(bits(id))]).await?;
        Ok(match rows.first() {
            Some(row) => !member_row(row.as_ref())?.expires_at.ended_by(now),
            None => false,
        })
    }

    pub(crate) async fn delete_member(&mut self, id: u64) -> Result<()> {
        let args = [Arg::Int(bits(id))];
        self.tx.execute(&self.s.delete_member, &args).await
    }

    /// The fence statement on the keys (parameters key, a revision at which it was held).
    pub(crate) fn fence_sql(&self) -> String {
        self.s.fence.clone()
    }

    /// Wakes the layer's watchers in other processes at commit, where the engine can push
    /// (once: a [`record`](EtcdTx::record) may have sent the signal with its change).
    pub(crate) async fn notify(&mut self) -> Result<()> {
        if !self.signalled {
            self.tx.notify(Topic::Layer(super::TOPIC)).await?;
            self.signalled = true;
        }
        Ok(())
    }
}
