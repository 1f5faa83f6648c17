//! The operations of [`SqlBackend`]: its one `impl Backend`. Every write runs the model
//! ([`decide`]) in a transaction that holds the lease row's lock and reads the database's clock
//! after taking it; the [`Engine`] says how its database spells that, and may decide some
//! operations in one statement first.

use super::backend::{Engine, SqlBackend};
use super::decided::exhausted;
use super::dialect::EpochSql;
use super::rows::RawLease;
use super::statements::RENEW_CHUNK;
use crate::backend::tx::int::bigint;
use crate::backend::tx::{Body, Outcome, Tx};
use crate::backend::{Applied, Backend, BackendKind, HistoryEntry, RedactedUrl, Renewed, Snapshot};
use crate::error::{Error, Result};
use crate::model::{decide_among, Clock, DbTime, Effect, Epoch, Lease, Op, Standing};
use sqlx::database::HasStatementCache;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type};
use tokio::sync::broadcast;

// === the model's transaction and the rows it reads ===

impl<E: Engine> SqlBackend<E>
where
    E::Database: HasStatementCache,
    for<'c> &'c mut <E::Database as Database>::Connection: Executor<'c, Database = E::Database>,
    for<'q> <E::Database as Database>::Arguments<'q>: IntoArguments<'q, E::Database>,
    for<'a> &'a str:
        ColumnIndex<<E::Database as Database>::Row> + Encode<'a, E::Database> + Type<E::Database>,
    for<'a> String: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> Option<String>: Encode<'a, E::Database>,
    for<'a> i64: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> bool: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
{
    /// Every statement tenure sends on this store: behind a transaction-mode pooler unnamed
    /// (a named one would stay behind on a server that other clients then get, and be missing
    /// on the next one), otherwise prepared once per connection and cached.
    pub(in crate::backend) fn query<'q>(
        &self,
        sql: &'q str,
    ) -> sqlx::query::Query<'q, E::Database, <E::Database as Database>::Arguments<'q>> {
        sqlx::query(sql).persistent(!self.pooled)
    }

    /// Runs a read (or DDL) on the pool, all its rows. Behind a transaction-mode pooler in a
    /// transaction of its own: an unnamed statement takes two round trips (parse, then
    /// execute), and only a transaction keeps both on one server.
    pub(super) async fn read<'q>(
        &self,
        query: sqlx::query::Query<'q, E::Database, <E::Database as Database>::Arguments<'q>>,
    ) -> std::result::Result<Vec<<E::Database as Database>::Row>, sqlx::Error> {
        if !self.pooled {
            return query.fetch_all(&self.pool).await;
        }
        let mut tx = self.pool.begin_with(self.engine.begin()).await?;
        let rows = query.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows)
    }

    fn raw_lease(
        row: &<E::Database as Database>::Row,
    ) -> std::result::Result<RawLease, sqlx::Error> {
        Ok(RawLease {
            name: row.try_get("name")?,
            holder: row.try_get("holder")?,
            term: row.try_get("term")?,
            acquired_us: row.try_get("acquired_us")?,
            renewed_us: row.try_get("renewed_us")?,
            expires_us: row.try_get("expires_us")?,
            ttl_ms: row.try_get("ttl_ms")?,
            metadata: row.try_get("metadata")?,
            handover_to: row.try_get("handover_to")?,
            paused: row.try_get("paused")?,
        })
    }

    /// A lease row, as every statement that returns one reads it.
    pub(in crate::backend) fn lease_from(
        &self,
        row: &<E::Database as Database>::Row,
    ) -> Result<Lease> {
        Self::raw_lease(row)?.into_lease(&self.stmts.lease_table)
    }

    /// The answer of an engine's one-statement lock operation that wrote (`Engine::
    /// one_statement`): the lease row and the clock (`now_us`) it returned, in `epoch`.
    #[cfg_attr(not(any(feature = "sqlite", feature = "mysql")), allow(dead_code))]
    pub(in crate::backend) fn cycle_applied(
        &self,
        row: &<E::Database as Database>::Row,
        op: &Op,
        epoch: Epoch,
    ) -> Result<Applied> {
        let effect = match op {
            Op::Release { .. } => Effect::Released,
            _ => Effect::Acquired {
                took_over_from: None,
            },
        };
        Ok(Applied {
            now: DbTime(row.try_get("now_us")?),
            epoch,
            lease: Some(self.lease_from(row)?),
            effect,
        })
    }

    /// The database's clock from a row of the `now` statement, read inside a write
    /// transaction; [`Error::ReadOnly`] if the row says the server is read-only (where the
    /// dialect must check that itself: MySQL, whose privileged users could still write).
    pub(in crate::backend) fn clock(&self, row: &<E::Database as Database>::Row) -> Result<DbTime> {
        if self.stmts.checks_read_only && row.try_get::<i64, _>("read_only")? != 0 {
            return Err(Error::ReadOnly {
                detail: "@@global.read_only is ON".to_string(),
            });
        }
        Ok(DbTime(row.try_get::<i64, _>("now_us")?))
    }

    /// The clock and the epoch from a row of the `now` statement (or of PostgreSQL's locked
    /// row, which reads both with the lock): the database's instant, checked for a read-only
    /// server, and the epoch a new term is minted in. On MySQL/MariaDB a server that did not
    /// begin the current epoch begins a new one here, in `tx`.
    pub(in crate::backend) async fn clock_in(
        &self,
        tx: &mut <E::Database as Database>::Connection,
        row: &<E::Database as Database>::Row,
    ) -> Result<Clock> {
        let now = self.clock(row)?;
        let epoch = match self.stmts.epoch {
            EpochSql::None => Epoch::ZERO,
            EpochSql::Timeline(_) => {
                let tli: i64 = row.try_get("tli")?;
                Epoch::timeline(u32::try_from(tli).map_err(|_| Error::Corrupt {
                    table: "pg_walfile_name".to_string(),
                    reason: format!("timeline {tli}"),
                })?)
            }
            EpochSql::ServerRow => {
                let server: i64 = row.try_get("server_id")?;
                let owner: Option<i64> = row.try_get("epoch_server")?;
                let floor: Option<i64> = row.try_get("epoch_floor")?;
                match (owner, floor) {
                    (Some(owner), Some(floor)) if owner == server => {
                        Epoch::from_floor(u64::try_from(floor).unwrap_or(0))
                    }
                    _ => self.begin_epoch(tx, server, now).await?,
                }
            }
        };
        self.engine.saw_epoch(epoch);
        Ok(Clock { now, epoch })
    }

    /// MySQL/MariaDB: `server` writes terms, but another server began the current epoch (this
    /// one was promoted), or none did yet. Begins a new epoch under the epoch row's lock: its
    /// floor is the larger of the old floor + 1 and the database's `now` in microseconds, so
    /// that its terms lie above every term the old primary issued, lost commits included (as
    /// long as that primary issued fewer terms of a name than microseconds passed since its own
    /// epoch began, and this server's clock is not behind its by more than that); the first
    /// epoch ever has floor 0 (terms as they were).
    async fn begin_epoch(
        &self,
        tx: &mut <E::Database as Database>::Connection,
        server: i64,
        now: DbTime,
    ) -> Result<Epoch> {
        let s = &self.stmts;
        let locked = self.query(&s.epoch_lock).fetch_optional(&mut *tx).await?;
        let previous = match &locked {
            Some(row) => Some((
                row.try_get::<i64, _>("server_id")?,
                row.try_get::<i64, _>("epoch")?,
            )),
            None => None,
        };
        let floor = match previous {
            // Another transaction on this server began it meanwhile.
            Some((owner, floor)) if owner == server => {
                return Ok(Epoch::from_floor(u64::try_from(floor).unwrap_or(0)));
            }
            Some((_, old)) => old.saturating_add(1).max(now.0),
            None => 0,
        };
        let statement = match previous {
            Some(_) => &s.epoch_update,
            None => &s.epoch_insert,
        };
        self.query(statement)
            .bind(server)
            .bind(floor)
            .bind(now.0)
            .execute(&mut *tx)
            .await?;
        if let Some((owner, old)) = previous {
            tracing::info!(
                url = %self.url,
                server,
                previous_server = owner,
                previous_floor = old,
                floor,
                "a new epoch of the database: this server had not written terms in the current \
                 one (a promotion); every new term lies above the floor"
            );
        }
        Ok(Epoch::from_floor(u64::try_from(floor).unwrap_or(0)))
    }

    /// Rows of a `clock_join` query: the clock, and the lease if the join matched.
    pub(in crate::backend) fn snapshot_from(
        &self,
        rows: &[<E::Database as Database>::Row],
    ) -> Result<Snapshot> {
        let mut now = None;
        let mut leases = Vec::new();
        for row in rows {
            now = Some(DbTime(row.try_get::<i64, _>("now_us")?));
            if row.try_get::<Option<String>, _>("name")?.is_some() {
                leases.push(self.lease_from(row)?);
            }
        }
        let now = now.ok_or_else(|| Error::Corrupt {
            table: self.stmts.lease_table.clone(),
            reason: "the clock query returned no row".to_string(),
        })?;
        Ok(Snapshot { now, leases })
    }

    /// `op` inside the caller's transaction `tx` (which commits): lock the row, read the
    /// clock after the lock was granted, let the model decide, write the row and the event.
    ///
    /// `at`: decide at this earlier instant of the same transaction instead (a transaction
    /// that read its clock before, see `Tx::lease`: what it decides must hold at that one
    /// instant). Deciding earlier than the lock was granted only errs towards "still held": no
    /// acquisition of a lease that expired in between, and a renewal that ends no later than
    /// one decided now.
    pub(in crate::backend) async fn apply_in(
        &self,
        tx: &mut <E::Database as Database>::Connection,
        name: &str,
        op: &Op,
        actor: &str,
        at: Option<Clock>,
        standing: Option<&Standing<'_>>,
    ) -> Result<Applied> {
        let s = &self.stmts;
        let row = self
            .query(&s.lock_row)
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        let current = row.as_ref().map(|row| self.lease_from(row)).transpose()?;
        let clock = match (at, &row) {
            (Some(at), _) => at,
            // PostgreSQL read the clock (and the timeline) with the lock.
            (None, Some(row)) if self.stmts.dialect().now_with_lock => {
                self.clock_in(tx, row).await?
            }
            (None, _) => {
                let clock_row = self.query(&s.now).fetch_one(&mut *tx).await?;
                self.clock_in(tx, &clock_row).await?
            }
        };
        let Clock { now, epoch } = clock;
        let decision = decide_among(clock, name, current.as_ref(), op, standing);
        if decision.effect == Effect::TermsExhausted {
            return Err(exhausted(name, current.as_ref(), epoch));
        }
        self.write_decision(tx, name, current.is_some(), &decision, now, actor)
            .await?;
        Ok(Applied {
            now,
            epoch,
            lease: decision.lease,
            effect: decision.effect,
        })
    }
}

// === impl Backend ===

#[async_trait::async_trait]
impl<E: Engine> Backend for SqlBackend<E>
where
    E::Database: HasStatementCache,
    for<'c> &'c mut <E::Database as Database>::Connection: Executor<'c, Database = E::Database>,
    for<'q> <E::Database as Database>::Arguments<'q>: IntoArguments<'q, E::Database>,
    for<'a> &'a str:
        ColumnIndex<<E::Database as Database>::Row> + Encode<'a, E::Database> + Type<E::Database>,
    for<'a> String: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> Option<String>: Encode<'a, E::Database>,
    for<'a> i64: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> bool: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    <E::Database as Database>::Row: Send + Sync,
    for<'a> &'a [u8]: Encode<'a, E::Database> + Type<E::Database>,
    for<'a> Option<&'a str>: Encode<'a, E::Database>,
    for<'a> Option<i64>: Encode<'a, E::Database>,
    for<'a> Vec<u8>: Decode<'a, E::Database> + Type<E::Database>,
{
    fn kind(&self) -> BackendKind {
        E::KIND
    }

    fn url(&self) -> &RedactedUrl {
        &self.url
    }

    async fn apply(&self, name: &str, op: &Op, actor: &str) -> Result<Applied> {
        // One autocommitted statement is two round trips when unnamed: not behind a pooler. And
        // only with the engine's own epochs: the statements mint terms in them.
        let fast = match self.pooled || self.stmts.epoch != E::dialect().epoch {
            true => None,
            false => E::one_statement(self, name, op, actor).await?,
        };
        let applied = match fast {
            Some(applied) => applied,
            None => {
                let mut body = LeaseOp {
                    name,
                    op,
                    actor,
                    applied: None,
                };
                // The one operation it decided is `body.applied`, heard of below.
                self.run_body(&mut body).await?;
                body.applied.ok_or_else(|| Error::Corrupt {
                    table: self.stmts.lease_table.clone(),
                    reason: format!("the transaction on {name:?} decided nothing"),
                })?
            }
        };
        // Committed: the engine may tell other processes (SQLite's and MySQL's doorbells).
        self.engine.applied(name, op, &applied);
        Ok(applied)
    }

    async fn transaction(&self, body: &mut dyn Body) -> Result<()> {
        let committed = self.run_body(body).await?;
        // Committed: the engine may tell other processes (SQLite's and MySQL's doorbells) of
        // the lease operations it decided and of the topics the body signalled.
        for (name, op, applied) in &committed.decided {
            self.engine.applied(name, op, applied);
        }
        if !committed.topics.is_empty() {
            self.engine.committed(&committed.topics);
        }
        Ok(())
    }

    async fn renew_many(&self, holder: &str, leases: &[(String, u64)]) -> Result<Renewed> {
        let s = &self.stmts;
        let mut tx = self.pool.begin_with(self.engine.begin()).await?;
        let now = self.clock(&self.query(&s.now).fetch_one(&mut *tx).await?)?;
        let mut renewed = Vec::with_capacity(leases.len());
        // The engine's one statement where it has one (PostgreSQL); else a chunk at a time.
        let whole = E::renew_all(self, &mut tx, holder, leases, now).await?;
        for row in whole.iter().flatten() {
            renewed.push(self.lease_from(row)?);
        }
        let chunked = if whole.is_some() { &[][..] } else { leases };
        for chunk in chunked.chunks(RENEW_CHUNK) {
            let (update, read_back) = s.renew(chunk.len());
            let mut query = self
                .query(&update)
                .bind(now.0)
                .bind(now.0)
                .bind(holder)
                .bind(now.0)
                .bind(holder);
            for (name, term) in chunk {
                query = query.bind(name).bind(bigint("term", *term)?);
            }
            let rows = match read_back {
                None => query.fetch_all(&mut *tx).await?,
                Some(select) => {
                    query.execute(&mut *tx).await?;
                    let mut query = self.query(&select).bind(holder).bind(now.0);
                    for (name, term) in chunk {
                        query = query.bind(name).bind(bigint("term", *term)?);
                    }
                    query.fetch_all(&mut *tx).await?
                }
            };
            for row in &rows {
                renewed.push(self.lease_from(row)?);
            }
        }
        tx.commit().await?;
        Ok(Renewed {
            now,
            leases: renewed,
        })
    }

    async fn last_tick(&self, name: &str) -> Result<(Option<i64>, DbTime)> {
        let rows = self
            .read(self.query(&self.stmts.last_tick).bind(name))
            .await?;
        let row = rows.first().ok_or(sqlx::Error::RowNotFound)?;
        Ok((row.try_get("last_tick_ms")?, DbTime(row.try_get("now_us")?)))
    }

    async fn complete_tick(
        &self,
        name: &str,
        holder: &str,
        term: u64,
        tick_ms: i64,
    ) -> Result<bool> {
        let s = &self.stmts;
        let mut tx = self.pool.begin_with(self.engine.begin()).await?;
        // The same fence an application runs in its own transaction (`LeaderGuard::fence`).
        let held = self
            .query(&s.fence)
            .bind(name)
            .bind(holder)
            .bind(bigint("term", term)?)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
        if !held {
            return Err(Error::LeaseLost {
                name: name.to_string(),
                candidate: holder.to_string(),
                term,
            });
        }
        let now = self
            .clock(&self.query(&s.now).fetch_one(&mut *tx).await?)?
            .0;
        let last: Option<i64> = self
            .query(&s.lock_tick)
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?
            .map(|row| row.try_get("last_tick_ms"))
            .transpose()?;
        let statement = match last {
            Some(last) if last >= tick_ms => return Ok(false),
            Some(_) => &s.update_tick,
            None => &s.insert_tick,
        };
        self.query(statement)
            .bind(tick_ms)
            .bind(bigint("term", term)?)
            .bind(holder)
            .bind(now)
            .bind(name)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn get(&self, name: &str) -> Result<Snapshot> {
        let rows = self
            .read(self.query(&self.stmts.get_row).bind(name))
            .await?;
        self.snapshot_from(&rows)
    }

    async fn list(&self) -> Result<Snapshot> {
        let rows = self.read(self.query(&self.stmts.list)).await?;
        self.snapshot_from(&rows)
    }

    async fn history(&self, name: &str, limit: u32) -> Result<Vec<HistoryEntry>> {
        let rows = self
            .read(
                self.query(&self.stmts.history)
                    .bind(name)
                    .bind(i64::from(limit)),
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(HistoryEntry {
                    id: row.try_get("id")?,
                    name: row.try_get("name")?,
                    term: u64::try_from(row.try_get::<i64, _>("term")?).unwrap_or(0),
                    holder: row.try_get("holder")?,
                    event: row.try_get("event")?,
                    at: DbTime(row.try_get("at_us")?),
                    actor: row.try_get("actor")?,
                    detail: row.try_get("detail")?,
                })
            })
            .collect()
    }

    async fn migrate(&self) -> Result<()> {
        self.create_tables().await
    }

    async fn check_schema(&self) -> Result<()> {
        self.verify_schema().await
    }

    fn schema_sql(&self) -> String {
        self.stmts.script()
    }

    fn fence_sql(&self) -> Option<String> {
        Some(self.stmts.fence.clone())
    }

    fn transaction_pooler(&self) -> bool {
        self.pooled
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        self.engine.subscribe()
    }

    fn discard_connections(&self) {
        self.fresh.discard_open_connections();
    }

    async fn close(&self) {
        self.engine.close();
        self.pool.close().await;
    }
}

/// A lease operation as a transaction's body: the row locked, the clock read after the lock,
/// the model's decision written with its event (`Tx::lease`).
struct LeaseOp<'a> {
    name: &'a str,
    op: &'a Op,
    actor: &'a str,
    applied: Option<Applied>,
}

#[async_trait::async_trait]
impl Body for LeaseOp<'_> {
    fn writes(&self) -> bool {
        true
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        self.applied = Some(tx.lease(self.name, self.op, self.actor, None).await?);
        Ok(Outcome::Commit)
    }
}
