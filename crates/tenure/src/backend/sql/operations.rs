//! The operations of [`SqlBackend`]: its one `impl Backend`. Every write runs the model
//! ([`decide`]) in a transaction that holds the lease row's lock and reads the database's clock
//! after taking it; the [`Engine`] says how its database spells that, and may decide some
//! operations in one statement first.

use super::backend::{Engine, SqlBackend};
use super::classify::{is_duplicate_object, is_missing_table, is_retryable};
use super::retention::prunes_history;
use super::rows::RawLease;
use super::statements::{RENEW_CHUNK, SCHEMA_VERSION};
use crate::backend::{Applied, Backend, BackendKind, HistoryEntry, RedactedUrl, Renewed, Snapshot};
use crate::error::{Error, Result};
use crate::model::{decide, DbTime, Effect, Lease, Op};
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
    async fn read<'q>(
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
    /// one_statement`): the lease row and the clock (`now_us`) it returned.
    pub(in crate::backend) fn cycle_applied(
        &self,
        row: &<E::Database as Database>::Row,
        op: &Op,
    ) -> Result<Applied> {
        let effect = match op {
            Op::Release { .. } => Effect::Released,
            _ => Effect::Acquired {
                took_over_from: None,
            },
        };
        Ok(Applied {
            now: DbTime(row.try_get("now_us")?),
            lease: Some(self.lease_from(row)?),
            effect,
        })
    }

    /// The database's clock from a row of the `now` statement, read inside a write
    /// transaction; [`Error::ReadOnly`] if the row says the server is read-only (where the
    /// dialect must check that itself: MySQL, whose privileged users could still write).
    pub(in crate::backend) fn clock(&self, row: <E::Database as Database>::Row) -> Result<DbTime> {
        if self.stmts.checks_read_only && row.try_get::<i64, _>("read_only")? != 0 {
            return Err(Error::ReadOnly {
                detail: "@@global.read_only is ON".to_string(),
            });
        }
        Ok(DbTime(row.try_get::<i64, _>("now_us")?))
    }

    /// Rows of a `clock_join` query: the clock, and the lease if the join matched.
    fn snapshot_from(&self, rows: &[<E::Database as Database>::Row]) -> Result<Snapshot> {
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

    /// Installs the engine's stored routines (through the text protocol: a routine's DDL is
    /// no prepared statement); one that cannot be installed (no `CREATE ROUTINE` privilege,
    /// say) costs speed, not correctness: the operations it serves run the transaction.
    async fn install_routines(&self) {
        for routine in &self.stmts.routines {
            if let Err(e) = sqlx::raw_sql(routine).execute(&self.pool).await {
                let first = routine.lines().next().unwrap_or_default();
                tracing::warn!(
                    url = %self.url,
                    error = %e,
                    "could not install a stored routine ({first} …): the operations it serves \
                     run the model's transaction instead"
                );
            }
        }
    }

    /// [`Backend::apply`] before the engine hears of it: one statement where the engine has
    /// one, else the model's transaction, again (up to 8 times) after a transient conflict.
    async fn apply_retrying(&self, name: &str, op: &Op, actor: &str) -> Result<Applied> {
        // One autocommitted statement is two round trips when unnamed: not behind a pooler.
        if !self.pooled {
            if let Some(applied) = E::one_statement(self, name, op, actor).await? {
                return Ok(applied);
            }
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.apply_once(name, op, actor).await {
                Err(Error::Database(e)) if attempt < 8 && is_retryable(&e) => {
                    tracing::debug!(name, error = %e, "transient conflict; retrying");
                    self.engine.conflict(name, &e);
                    let pause = rand::random::<u64>() % (2 * attempt as u64 + 1);
                    tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                }
                other => return other,
            }
        }
    }

    /// One attempt at `op`: lock the row, read the clock after the lock was granted, let the
    /// model decide, write the row and the event it returns, commit.
    async fn apply_once(&self, name: &str, op: &Op, actor: &str) -> Result<Applied> {
        let mut tx = self.pool.begin_with(self.engine.begin()).await?;
        let applied = self.apply_in(&mut tx, name, op, actor, None).await?;
        tx.commit().await?;
        Ok(applied)
    }

    /// `op` inside the caller's transaction `tx` (which commits): lock the row, read the
    /// clock after the lock was granted, let the model decide, write the row and the event.
    ///
    /// `at`: decide at this earlier instant of the same transaction instead (the Consul layer,
    /// whose leases must end at the same instant as their session). Deciding earlier than the
    /// lock was granted only errs towards "still held": no acquisition of a lease that expired
    /// in between, and a renewal that ends no later than one decided now.
    pub(in crate::backend) async fn apply_in(
        &self,
        tx: &mut <E::Database as Database>::Connection,
        name: &str,
        op: &Op,
        actor: &str,
        at: Option<DbTime>,
    ) -> Result<Applied> {
        let s = &self.stmts;
        let row = self
            .query(&s.lock_row)
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        let mut now = None;
        let current = match &row {
            Some(row) => {
                if let Ok(Some(us)) = row.try_get::<Option<i64>, _>("now_us") {
                    now = Some(DbTime(us));
                }
                Some(self.lease_from(row)?)
            }
            None => None,
        };
        let now = match (at, now) {
            (Some(at), _) => at,
            (None, Some(now)) => now,
            (None, None) => self.clock(self.query(&s.now).fetch_one(&mut *tx).await?)?,
        };
        let decision = decide(now, name, current.as_ref(), op);
        if let (true, Some(lease)) = (decision.write, &decision.lease) {
            let query = if current.is_some() {
                self.query(&s.update_row)
            } else {
                self.query(&s.insert_row).bind(&lease.name)
            };
            let query = query
                .bind(&lease.holder)
                .bind(lease.term as i64)
                .bind(lease.acquired_at.0)
                .bind(lease.renewed_at.0)
                .bind(lease.expires_at.0)
                .bind(lease.ttl_ms as i64)
                .bind(&lease.metadata)
                .bind(&lease.handover_to)
                .bind(lease.paused);
            let query = if current.is_some() {
                query.bind(&lease.name)
            } else {
                query
            };
            query.execute(&mut *tx).await?;
        }
        if let (None, true, Some(notify)) = (&decision.event, decision.wake, &s.notify) {
            self.query(notify).bind(name).execute(&mut *tx).await?;
        }
        if let Some(event) = &decision.event {
            let prune = prunes_history(event);
            if let Some(keep) = self.retention_us.filter(|_| prune) {
                self.query(&s.prune_history)
                    .bind(name)
                    .bind(now.0.saturating_sub(keep))
                    .execute(&mut *tx)
                    .await?;
            }
            let insert = match (&s.insert_history_and_notify, decision.wake) {
                (Some(announced), true) => announced,
                _ => &s.insert_history,
            };
            self.query(insert)
                .bind(name)
                .bind(event.term as i64)
                .bind(&event.holder)
                .bind(event.kind.as_str())
                .bind(now.0)
                .bind(actor)
                .bind(&event.detail)
                .execute(&mut *tx)
                .await?;
        }
        Ok(Applied {
            now,
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
    for<'a> Option<i64>: Encode<'a, E::Database>,
    for<'a> Vec<u8>: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
{
    fn kind(&self) -> BackendKind {
        E::KIND
    }

    fn url(&self) -> &RedactedUrl {
        &self.url
    }

    async fn apply(&self, name: &str, op: &Op, actor: &str) -> Result<Applied> {
        let applied = self.apply_retrying(name, op, actor).await?;
        // Committed: the engine may tell other processes (SQLite's and MySQL's doorbells).
        self.engine.applied(name, op, &applied);
        Ok(applied)
    }

    async fn renew_many(&self, holder: &str, leases: &[(String, u64)]) -> Result<Renewed> {
        let s = &self.stmts;
        let mut tx = self.pool.begin_with(self.engine.begin()).await?;
        let now = self.clock(self.query(&s.now).fetch_one(&mut *tx).await?)?;
        let mut renewed = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(RENEW_CHUNK) {
            let (update, read_back) = s.renew(chunk.len());
            let mut query = self
                .query(&update)
                .bind(now.0)
                .bind(now.0)
                .bind(holder)
                .bind(now.0)
                .bind(holder);
            for (name, term) in chunk {
                query = query.bind(name).bind(*term as i64);
            }
            let rows = match read_back {
                None => query.fetch_all(&mut *tx).await?,
                Some(select) => {
                    query.execute(&mut *tx).await?;
                    let mut query = self.query(&select).bind(holder).bind(now.0);
                    for (name, term) in chunk {
                        query = query.bind(name).bind(*term as i64);
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
            .bind(term as i64)
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
        let now = self.clock(self.query(&s.now).fetch_one(&mut *tx).await?)?.0;
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
            .bind(term as i64)
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
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result: std::result::Result<(), sqlx::Error> = async {
                for ddl in &self.stmts.schema {
                    self.read(self.query(ddl)).await?;
                }
                self.read(self.query(&self.stmts.init_version)).await?;
                Ok(())
            }
            .await;
            match result {
                // Concurrent `CREATE TABLE IF NOT EXISTS` can collide in PostgreSQL's
                // catalog; the other creator has then done the work.
                Err(e) if attempt < 6 && (is_retryable(&e) || is_duplicate_object(&e)) => {}
                Err(e) => return Err(e.into()),
                Ok(()) => {
                    self.install_routines().await;
                    return self.check_schema().await;
                }
            }
        }
    }

    async fn check_schema(&self) -> Result<()> {
        let missing = |table: &str| Error::SchemaMissing {
            table: table.to_string(),
            url: self.url.to_string(),
        };
        let version = match self.read(self.query(&self.stmts.schema_version)).await {
            Ok(rows) => rows
                .first()
                .ok_or(sqlx::Error::RowNotFound)?
                .try_get::<Option<i64>, _>("version")?,
            Err(e) if is_missing_table(&e) => {
                return Err(missing(&self.stmts.schema_table));
            }
            Err(e) => return Err(e.into()),
        };
        if let Err(e) = self.read(self.query(&self.stmts.probe_lease)).await {
            return Err(if is_missing_table(&e) {
                missing(&self.stmts.lease_table)
            } else {
                e.into()
            });
        }
        match version {
            None => Err(missing(&self.stmts.schema_table)),
            Some(found) if found > SCHEMA_VERSION => Err(Error::SchemaTooNew {
                found,
                supported: SCHEMA_VERSION,
                url: self.url.to_string(),
            }),
            Some(_) => Ok(()),
        }
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

    async fn consul(
        &self,
        request: &crate::consul::Request,
        actor: &str,
    ) -> Result<crate::consul::Answer> {
        self.consul_request(request, actor).await
    }
}
