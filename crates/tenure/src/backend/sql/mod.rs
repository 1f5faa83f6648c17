//! What the three SQL backends share: the statements, built from a small dialect description,
//! and (as a macro, because sqlx's executor traits differ per engine) the transaction that
//! runs the model.

mod backend;
mod classify;
mod dialect;
mod engine;
mod retention;
mod rows;
mod statements;

pub(crate) use backend::SqlBackend;
pub(crate) use classify::{is_duplicate_object, is_missing_table, is_retryable};
pub(crate) use dialect::Dialect;
pub(crate) use engine::Engine;
pub(crate) use retention::{acquisition_prunes, prunes_history};
pub(crate) use rows::RawLease;
pub(crate) use statements::{lease_columns, Statements, RENEW_CHUNK, SCHEMA_VERSION};

use crate::error::Result;

/// A backend's way to decide some operations in one statement (PostgreSQL's lock cycle); by
/// default every operation runs the model's transaction.
pub(crate) trait OneStatement {
    /// The answer to `op`, or `None` where the model's transaction must decide it.
    async fn one_statement(
        &self,
        _name: &str,
        _op: &crate::model::Op,
        _actor: &str,
    ) -> Result<Option<crate::backend::Applied>> {
        Ok(None)
    }
}

/// Implements [`Backend`](crate::backend::Backend) for a struct with fields `pool`
/// (`sqlx::Pool<$db>`), `stmts` ([`Statements`]), `url`, `retention_us` (`Option<i64>`) and
/// `begin` (the statement that opens a write transaction), and an impl of [`OneStatement`].
macro_rules! impl_sql_backend {
    ($ty:ty, $db:ty, $kind:expr) => {
        impl $ty {
            fn raw_lease(
                row: &<$db as sqlx::Database>::Row,
            ) -> std::result::Result<$crate::backend::sql::RawLease, sqlx::Error> {
                use sqlx::Row;
                Ok($crate::backend::sql::RawLease {
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

            fn lease_from(
                &self,
                row: &<$db as sqlx::Database>::Row,
            ) -> $crate::error::Result<$crate::model::Lease> {
                Self::raw_lease(row)?.into_lease(&self.stmts.lease_table)
            }

            /// Rows of a `clock_join` query: the clock, and the lease if the join matched.
            fn snapshot_from(
                &self,
                rows: &[<$db as sqlx::Database>::Row],
            ) -> $crate::error::Result<$crate::backend::Snapshot> {
                use sqlx::Row;
                let mut now = None;
                let mut leases = Vec::new();
                for row in rows {
                    now = Some($crate::model::DbTime(row.try_get::<i64, _>("now_us")?));
                    if row.try_get::<Option<String>, _>("name")?.is_some() {
                        leases.push(self.lease_from(row)?);
                    }
                }
                let now = now.ok_or_else(|| $crate::error::Error::Corrupt {
                    table: self.stmts.lease_table.clone(),
                    reason: "the clock query returned no row".to_string(),
                })?;
                Ok($crate::backend::Snapshot { now, leases })
            }

            async fn apply_once(
                &self,
                name: &str,
                op: &$crate::model::Op,
                actor: &str,
            ) -> $crate::error::Result<$crate::backend::Applied> {
                use sqlx::Row;
                let s = &self.stmts;
                let mut tx = self.pool.begin_with(self.begin).await?;
                let row = sqlx::query(&s.lock_row)
                    .bind(name)
                    .fetch_optional(&mut *tx)
                    .await?;
                let mut now = None;
                let current = match &row {
                    Some(row) => {
                        if let Ok(Some(us)) = row.try_get::<Option<i64>, _>("now_us") {
                            now = Some($crate::model::DbTime(us));
                        }
                        Some(self.lease_from(row)?)
                    }
                    None => None,
                };
                let now = match now {
                    Some(now) => now,
                    None => $crate::model::DbTime(
                        sqlx::query(&s.now)
                            .fetch_one(&mut *tx)
                            .await?
                            .try_get::<i64, _>("now_us")?,
                    ),
                };
                let decision = $crate::model::decide(now, name, current.as_ref(), op);
                if let (true, Some(lease)) = (decision.write, &decision.lease) {
                    let query = if current.is_some() {
                        sqlx::query(&s.update_row)
                    } else {
                        sqlx::query(&s.insert_row).bind(&lease.name)
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
                if let Some(event) = &decision.event {
                    let prune = $crate::backend::sql::prunes_history(event);
                    if let Some(keep) = self.retention_us.filter(|_| prune) {
                        sqlx::query(&s.prune_history)
                            .bind(name)
                            .bind(now.0.saturating_sub(keep))
                            .execute(&mut *tx)
                            .await?;
                    }
                    sqlx::query(&s.insert_history)
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
                tx.commit().await?;
                Ok($crate::backend::Applied {
                    now,
                    lease: decision.lease,
                    effect: decision.effect,
                })
            }
        }

        #[async_trait::async_trait]
        impl $crate::backend::Backend for $ty {
            fn kind(&self) -> $crate::backend::BackendKind {
                $kind
            }

            fn url(&self) -> &$crate::backend::RedactedUrl {
                &self.url
            }

            async fn apply(
                &self,
                name: &str,
                op: &$crate::model::Op,
                actor: &str,
            ) -> $crate::error::Result<$crate::backend::Applied> {
                use $crate::backend::sql::OneStatement as _;
                if let Some(applied) = self.one_statement(name, op, actor).await? {
                    return Ok(applied);
                }
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    match self.apply_once(name, op, actor).await {
                        Err($crate::error::Error::Database(e))
                            if attempt < 8 && $crate::backend::sql::is_retryable(&e) =>
                        {
                            tracing::debug!(name, error = %e, "transient conflict; retrying");
                            let pause = rand::random::<u64>() % (2 * attempt as u64 + 1);
                            tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                        }
                        other => return other,
                    }
                }
            }

            async fn renew_many(
                &self,
                holder: &str,
                leases: &[(String, u64)],
            ) -> $crate::error::Result<$crate::backend::Renewed> {
                use sqlx::Row;
                let s = &self.stmts;
                let mut tx = self.pool.begin_with(self.begin).await?;
                let now = $crate::model::DbTime(
                    sqlx::query(&s.now)
                        .fetch_one(&mut *tx)
                        .await?
                        .try_get::<i64, _>("now_us")?,
                );
                let mut renewed = Vec::with_capacity(leases.len());
                for chunk in leases.chunks($crate::backend::sql::RENEW_CHUNK) {
                    let (update, read_back) = s.renew(chunk.len());
                    let mut query = sqlx::query(&update)
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
                            let mut query = sqlx::query(&select).bind(holder).bind(now.0);
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
                Ok($crate::backend::Renewed { now, leases: renewed })
            }

            async fn last_tick(
                &self,
                name: &str,
            ) -> $crate::error::Result<(Option<i64>, $crate::model::DbTime)> {
                use sqlx::Row;
                let row = sqlx::query(&self.stmts.last_tick)
                    .bind(name)
                    .fetch_one(&self.pool)
                    .await?;
                Ok((
                    row.try_get("last_tick_ms")?,
                    $crate::model::DbTime(row.try_get("now_us")?),
                ))
            }

            async fn complete_tick(
                &self,
                name: &str,
                holder: &str,
                term: u64,
                tick_ms: i64,
            ) -> $crate::error::Result<bool> {
                use sqlx::Row;
                let s = &self.stmts;
                let mut tx = self.pool.begin_with(self.begin).await?;
                let lease = sqlx::query(&s.fence_row)
                    .bind(name)
                    .fetch_optional(&mut *tx)
                    .await?;
                let held = match &lease {
                    Some(row) => {
                        row.try_get::<Option<String>, _>("holder")?.as_deref() == Some(holder)
                            && row.try_get::<i64, _>("term")? == term as i64
                            && row.try_get::<i64, _>("expires_us")?
                                > row.try_get::<i64, _>("now_us")?
                    }
                    None => false,
                };
                if !held {
                    return Err($crate::error::Error::LeaseLost {
                        name: name.to_string(),
                        candidate: holder.to_string(),
                        term,
                    });
                }
                let now: i64 = sqlx::query(&s.now)
                    .fetch_one(&mut *tx)
                    .await?
                    .try_get("now_us")?;
                let last: Option<i64> = sqlx::query(&s.lock_tick)
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
                sqlx::query(statement)
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

            async fn get(&self, name: &str) -> $crate::error::Result<$crate::backend::Snapshot> {
                let rows = sqlx::query(&self.stmts.get_row)
                    .bind(name)
                    .fetch_all(&self.pool)
                    .await?;
                self.snapshot_from(&rows)
            }

            async fn list(&self) -> $crate::error::Result<$crate::backend::Snapshot> {
                let rows = sqlx::query(&self.stmts.list).fetch_all(&self.pool).await?;
                self.snapshot_from(&rows)
            }

            async fn history(
                &self,
                name: &str,
                limit: u32,
            ) -> $crate::error::Result<Vec<$crate::backend::HistoryEntry>> {
                use sqlx::Row;
                let rows = sqlx::query(&self.stmts.history)
                    .bind(name)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter()
                    .map(|row| {
                        Ok($crate::backend::HistoryEntry {
                            id: row.try_get("id")?,
                            name: row.try_get("name")?,
                            term: u64::try_from(row.try_get::<i64, _>("term")?).unwrap_or(0),
                            holder: row.try_get("holder")?,
                            event: row.try_get("event")?,
                            at: $crate::model::DbTime(row.try_get("at_us")?),
                            actor: row.try_get("actor")?,
                            detail: row.try_get("detail")?,
                        })
                    })
                    .collect()
            }

            async fn migrate(&self) -> $crate::error::Result<()> {
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    let result: std::result::Result<(), sqlx::Error> = async {
                        for ddl in &self.stmts.schema {
                            sqlx::query(ddl).execute(&self.pool).await?;
                        }
                        sqlx::query(&self.stmts.init_version)
                            .execute(&self.pool)
                            .await?;
                        Ok(())
                    }
                    .await;
                    match result {
                        // Concurrent `CREATE TABLE IF NOT EXISTS` can collide in PostgreSQL's
                        // catalog; the other creator has then done the work.
                        Err(e)
                            if attempt < 6
                                && ($crate::backend::sql::is_retryable(&e)
                                    || $crate::backend::sql::is_duplicate_object(&e)) => {}
                        Err(e) => return Err(e.into()),
                        Ok(()) => return self.check_schema().await,
                    }
                }
            }

            async fn check_schema(&self) -> $crate::error::Result<()> {
                use sqlx::Row;
                let missing = |table: &str| $crate::error::Error::SchemaMissing {
                    table: table.to_string(),
                    url: self.url.to_string(),
                };
                let version = match sqlx::query(&self.stmts.schema_version)
                    .fetch_one(&self.pool)
                    .await
                {
                    Ok(row) => row.try_get::<Option<i64>, _>("version")?,
                    Err(e) if $crate::backend::sql::is_missing_table(&e) => {
                        return Err(missing(&self.stmts.schema_table));
                    }
                    Err(e) => return Err(e.into()),
                };
                if let Err(e) = sqlx::query(&self.stmts.probe_lease)
                    .fetch_optional(&self.pool)
                    .await
                {
                    return Err(if $crate::backend::sql::is_missing_table(&e) {
                        missing(&self.stmts.lease_table)
                    } else {
                        e.into()
                    });
                }
                match version {
                    None => Err(missing(&self.stmts.schema_table)),
                    Some(found) if found > $crate::backend::sql::SCHEMA_VERSION => {
                        Err($crate::error::Error::SchemaTooNew {
                            found,
                            supported: $crate::backend::sql::SCHEMA_VERSION,
                            url: self.url.to_string(),
                        })
                    }
                    Some(_) => Ok(()),
                }
            }

            fn schema_sql(&self) -> String {
                self.stmts.script()
            }

            fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
                self.subscription()
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("url", &self.url)
                    .field("lease_table", &self.stmts.lease_table)
                    .finish_non_exhaustive()
            }
        }
    };
}

pub(crate) use impl_sql_backend;
