//! The Consul layer's storage on every SQL engine: its statements, and [`ConsulTx`] over one
//! transaction of the store's pool. The rules are in `crate::consul`; the lease operations
//! they ask for run the model here, in the same transaction (`SqlBackend::apply_in`).

use super::backend::{Engine, SqlBackend};
use super::classify::is_retryable;
use super::dialect::Dialect;
use crate::consul::{Answer, Behavior, ConsulTx, EntryRow, LeaseState, Request, SessionRow};
use crate::error::{Error, Result};
use crate::model::{DbTime, Op};
use crate::records::Applied;
use sqlx::database::HasStatementCache;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type};

/// The statements of the Consul tables, with the prefix filled in.
pub(crate) struct ConsulStatements {
    clock: String,
    lock_index: String,
    read_index: String,
    insert_index: String,
    set_index: String,
    session: String,
    sessions: String,
    sessions_of_node: String,
    expired_sessions: String,
    insert_session: String,
    update_session: String,
    delete_session: String,
    entry: String,
    entries_from: String,
    entries_between: String,
    entries_of: String,
    insert_entry: String,
    update_entry: String,
    delete_entry: String,
}

impl ConsulStatements {
    pub(crate) fn new(prefix: &str, d: &Dialect) -> ConsulStatements {
        let p = d.param;
        let t = d.text;
        let index = format!("{prefix}consul_index");
        let sessions = format!("{prefix}consul_session");
        let kv = format!("{prefix}consul_kv");
        let lease = format!("{prefix}lease");
        let session_columns = format!(
            "SELECT {} AS id, {} AS name, {} AS node, ttl_ms, lease_ms, lock_delay_ms, \
             {} AS behavior, create_index, modify_index, {} AS expires_us FROM {sessions}",
            t("id"),
            t("name"),
            t("node"),
            t("behavior"),
            (d.to_us)("expires_at"),
        );
        let entry_columns = format!(
            "SELECT {} AS kv_key, k.value AS value, k.flags AS flags, {} AS session, \
             k.lock_index AS lock_index, k.create_index AS create_index, \
             k.modify_index AS modify_index, {} AS l_holder, l.term AS l_term, \
             {} AS l_acquired_us, {} AS l_expires_us \
             FROM {kv} k LEFT JOIN {lease} l ON l.name = k.kv_key",
            t("k.kv_key"),
            t("k.session"),
            t("l.holder"),
            (d.to_us)("l.acquired_at"),
            (d.to_us)("l.expires_at"),
        );
        ConsulStatements {
            clock: format!("SELECT {} AS now_us", d.now_us),
            lock_index: format!("SELECT idx FROM {index} WHERE id = 1 {}", d.for_update),
            read_index: format!("SELECT idx FROM {index} WHERE id = 1"),
            insert_index: format!("INSERT INTO {index} (id, idx) VALUES (1, 0)"),
            set_index: format!("UPDATE {index} SET idx = {} WHERE id = 1", p(1)),
            session: format!("{session_columns} WHERE id = {}", p(1)),
            sessions: format!("{session_columns} ORDER BY create_index"),
            sessions_of_node: format!(
                "{session_columns} WHERE node = {} ORDER BY create_index",
                p(1)
            ),
            expired_sessions: format!(
                "{session_columns} WHERE expires_at <= {} ORDER BY expires_at",
                (d.from_us)(&p(1))
            ),
            insert_session: format!(
                "INSERT INTO {sessions} (id, name, node, ttl_ms, lease_ms, lock_delay_ms, \
                 behavior, create_index, modify_index, expires_at) \
                 VALUES ({}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                p(1),
                p(2),
                p(3),
                p(4),
                p(5),
                p(6),
                p(7),
                p(8),
                p(9),
                (d.from_us)(&p(10))
            ),
            update_session: format!(
                "UPDATE {sessions} SET lease_ms = {}, modify_index = {}, expires_at = {} \
                 WHERE id = {}",
                p(1),
                p(2),
                (d.from_us)(&p(3)),
                p(4)
            ),
            delete_session: format!("DELETE FROM {sessions} WHERE id = {}", p(1)),
            entry: format!("{entry_columns} WHERE k.kv_key = {}", p(1)),
            entries_from: format!(
                "{entry_columns} WHERE k.kv_key >= {} ORDER BY k.kv_key",
                p(1)
            ),
            entries_between: format!(
                "{entry_columns} WHERE k.kv_key >= {} AND k.kv_key < {} ORDER BY k.kv_key",
                p(1),
                p(2)
            ),
            entries_of: format!(
                "{entry_columns} WHERE k.session = {} ORDER BY k.kv_key",
                p(1)
            ),
            insert_entry: format!(
                "INSERT INTO {kv} (kv_key, value, flags, session, lock_index, create_index, \
                 modify_index) VALUES ({}, {}, {}, {}, {}, {}, {})",
                p(1),
                p(2),
                p(3),
                p(4),
                p(5),
                p(6),
                p(7)
            ),
            update_entry: format!(
                "UPDATE {kv} SET value = {}, flags = {}, session = {}, lock_index = {}, \
                 create_index = {}, modify_index = {} WHERE kv_key = {}",
                p(1),
                p(2),
                p(3),
                p(4),
                p(5),
                p(6),
                p(7)
            ),
            delete_entry: format!("DELETE FROM {kv} WHERE kv_key = {}", p(1)),
        }
    }
}

/// The first string after every string that starts with `prefix`, in code-point (= UTF-8
/// byte) order: `prefix` with its last character raised by one (dropping any last characters
/// that cannot be raised). `None`: no such bound (every string from `prefix` on).
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let mut next = u32::from(last) + 1;
        if (0xD800..0xE000).contains(&next) {
            next = 0xE000;
        }
        if let Some(c) = char::from_u32(next) {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

fn u64_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// One transaction of the store's pool, as the Consul rules see it.
pub(crate) struct SqlConsulTx<'b, E: Engine> {
    backend: &'b SqlBackend<E>,
    tx: sqlx::Transaction<'static, E::Database>,
    writes: bool,
    now: Option<DbTime>,
}

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
    for<'a> Option<i64>: Encode<'a, E::Database>,
    for<'a> bool: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> Vec<u8>: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
{
    /// Runs a Consul request in a transaction of its own, again (up to 8 times) after a
    /// transient conflict, as the lease operations do.
    pub(in crate::backend) async fn consul_request(
        &self,
        request: &Request,
        actor: &str,
    ) -> Result<Answer> {
        let writes = request.writes();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = async {
                let tx = if writes || self.pooled {
                    self.pool.begin_with(self.engine.begin()).await?
                } else {
                    self.pool.begin().await?
                };
                let mut ctx = SqlConsulTx {
                    backend: self,
                    tx,
                    writes,
                    now: None,
                };
                let answer = crate::consul::run(&mut ctx, request, actor).await?;
                ctx.tx.commit().await?;
                if writes {
                    self.engine.consul_committed();
                }
                Ok(answer)
            }
            .await;
            match result {
                Err(Error::Database(e)) if attempt < 8 && is_retryable(&e) => {
                    tracing::debug!(error = %e, "transient conflict in a Consul request; retrying");
                    let pause = rand::random::<u64>() % (2 * attempt as u64 + 1);
                    tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                }
                other => return other,
            }
        }
    }

    fn session_row(row: &<E::Database as Database>::Row) -> Result<SessionRow> {
        let behavior: String = row.try_get("behavior")?;
        Ok(SessionRow {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
            node: row.try_get("node")?,
            ttl_ms: row.try_get::<Option<i64>, _>("ttl_ms")?.map(u64_of),
            lease_ms: u64_of(row.try_get("lease_ms")?),
            lock_delay_ms: u64_of(row.try_get("lock_delay_ms")?),
            behavior: Behavior::parse(&behavior).unwrap_or(Behavior::Release),
            create_index: u64_of(row.try_get("create_index")?),
            modify_index: u64_of(row.try_get("modify_index")?),
            expires_at: DbTime(row.try_get("expires_us")?),
        })
    }

    fn entry_row(row: &<E::Database as Database>::Row) -> Result<EntryRow> {
        let term: Option<i64> = row.try_get("l_term")?;
        let lease = match term {
            Some(term) => Some(LeaseState {
                holder: row.try_get("l_holder")?,
                term: u64_of(term),
                acquired_at: DbTime(row.try_get("l_acquired_us")?),
                expires_at: DbTime(row.try_get("l_expires_us")?),
            }),
            None => None,
        };
        Ok(EntryRow {
            key: row.try_get("kv_key")?,
            value: row.try_get("value")?,
            flags: row.try_get::<i64, _>("flags")? as u64,
            session: row.try_get("session")?,
            lock_index: u64_of(row.try_get("lock_index")?),
            create_index: u64_of(row.try_get("create_index")?),
            modify_index: u64_of(row.try_get("modify_index")?),
            lease,
        })
    }
}

#[async_trait::async_trait]
impl<E: Engine> ConsulTx for SqlConsulTx<'_, E>
where
    E::Database: HasStatementCache,
    for<'c> &'c mut <E::Database as Database>::Connection: Executor<'c, Database = E::Database>,
    for<'q> <E::Database as Database>::Arguments<'q>: IntoArguments<'q, E::Database>,
    for<'a> &'a str:
        ColumnIndex<<E::Database as Database>::Row> + Encode<'a, E::Database> + Type<E::Database>,
    for<'a> String: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> Option<String>: Encode<'a, E::Database>,
    for<'a> i64: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> Option<i64>: Encode<'a, E::Database>,
    for<'a> bool: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> Vec<u8>: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
{
    async fn now(&mut self) -> Result<DbTime> {
        if let Some(now) = self.now {
            return Ok(now);
        }
        let b = self.backend;
        // A writer checks (where the dialect must) that the server takes writes.
        let sql = if self.writes {
            &b.stmts.now
        } else {
            &b.stmts.consul.clock
        };
        let row = b.query(sql).fetch_one(&mut *self.tx).await?;
        let now = if self.writes {
            b.clock(row)?
        } else {
            DbTime(row.try_get("now_us")?)
        };
        self.now = Some(now);
        Ok(now)
    }

    async fn lock_index(&mut self) -> Result<u64> {
        let b = self.backend;
        let c = &b.stmts.consul;
        match b.query(&c.lock_index).fetch_optional(&mut *self.tx).await? {
            Some(row) => Ok(u64_of(row.try_get("idx")?)),
            None => {
                // First use: a concurrent creator makes this a unique violation, retried.
                b.query(&c.insert_index).execute(&mut *self.tx).await?;
                let row = b.query(&c.lock_index).fetch_one(&mut *self.tx).await?;
                Ok(u64_of(row.try_get("idx")?))
            }
        }
    }

    async fn read_index(&mut self) -> Result<u64> {
        let b = self.backend;
        let row = b
            .query(&b.stmts.consul.read_index)
            .fetch_optional(&mut *self.tx)
            .await?;
        Ok(match row {
            Some(row) => u64_of(row.try_get("idx")?),
            None => 0,
        })
    }

    async fn set_index(&mut self, index: u64) -> Result<()> {
        let b = self.backend;
        b.query(&b.stmts.consul.set_index)
            .bind(index as i64)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn session(&mut self, id: &str) -> Result<Option<SessionRow>> {
        let b = self.backend;
        let row = b
            .query(&b.stmts.consul.session)
            .bind(id)
            .fetch_optional(&mut *self.tx)
            .await?;
        row.as_ref().map(SqlBackend::<E>::session_row).transpose()
    }

    async fn sessions(&mut self, node: Option<&str>) -> Result<Vec<SessionRow>> {
        let b = self.backend;
        let c = &b.stmts.consul;
        let rows = match node {
            Some(node) => {
                b.query(&c.sessions_of_node)
                    .bind(node)
                    .fetch_all(&mut *self.tx)
                    .await?
            }
            None => b.query(&c.sessions).fetch_all(&mut *self.tx).await?,
        };
        rows.iter().map(SqlBackend::<E>::session_row).collect()
    }

    async fn expired_sessions(&mut self, now: DbTime, limit: u32) -> Result<Vec<SessionRow>> {
        let b = self.backend;
        let sql = format!("{} LIMIT {limit}", b.stmts.consul.expired_sessions);
        let rows = b.query(&sql).bind(now.0).fetch_all(&mut *self.tx).await?;
        rows.iter().map(SqlBackend::<E>::session_row).collect()
    }

    async fn insert_session(&mut self, s: &SessionRow) -> Result<()> {
        let b = self.backend;
        b.query(&b.stmts.consul.insert_session)
            .bind(&s.id)
            .bind(&s.name)
            .bind(&s.node)
            .bind(s.ttl_ms.map(|v| v as i64))
            .bind(s.lease_ms as i64)
            .bind(s.lock_delay_ms as i64)
            .bind(s.behavior.as_str())
            .bind(s.create_index as i64)
            .bind(s.modify_index as i64)
            .bind(s.expires_at.0)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn update_session(&mut self, s: &SessionRow) -> Result<()> {
        let b = self.backend;
        b.query(&b.stmts.consul.update_session)
            .bind(s.lease_ms as i64)
            .bind(s.modify_index as i64)
            .bind(s.expires_at.0)
            .bind(&s.id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn delete_session(&mut self, id: &str) -> Result<()> {
        let b = self.backend;
        b.query(&b.stmts.consul.delete_session)
            .bind(id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn entries(&mut self, key: &str, prefix: bool) -> Result<Vec<EntryRow>> {
        let b = self.backend;
        let c = &b.stmts.consul;
        let rows = if !prefix {
            b.query(&c.entry).bind(key).fetch_all(&mut *self.tx).await?
        } else {
            match prefix_end(key) {
                Some(end) => {
                    b.query(&c.entries_between)
                        .bind(key)
                        .bind(end)
                        .fetch_all(&mut *self.tx)
                        .await?
                }
                None => {
                    b.query(&c.entries_from)
                        .bind(key)
                        .fetch_all(&mut *self.tx)
                        .await?
                }
            }
        };
        let mut entries = rows
            .iter()
            .map(SqlBackend::<E>::entry_row)
            .collect::<Result<Vec<_>>>()?;
        // The range is only a bound for the index: the prefix test is this one.
        entries.retain(|e| {
            if prefix {
                e.key.starts_with(key)
            } else {
                e.key == key
            }
        });
        Ok(entries)
    }

    async fn entries_of(&mut self, session: &str) -> Result<Vec<EntryRow>> {
        let b = self.backend;
        let rows = b
            .query(&b.stmts.consul.entries_of)
            .bind(session)
            .fetch_all(&mut *self.tx)
            .await?;
        rows.iter().map(SqlBackend::<E>::entry_row).collect()
    }

    async fn insert_entry(&mut self, e: &EntryRow) -> Result<()> {
        let b = self.backend;
        b.query(&b.stmts.consul.insert_entry)
            .bind(&e.key)
            .bind(e.value.clone())
            .bind(e.flags as i64)
            .bind(&e.session)
            .bind(e.lock_index as i64)
            .bind(e.create_index as i64)
            .bind(e.modify_index as i64)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn update_entry(&mut self, e: &EntryRow) -> Result<()> {
        let b = self.backend;
        b.query(&b.stmts.consul.update_entry)
            .bind(e.value.clone())
            .bind(e.flags as i64)
            .bind(&e.session)
            .bind(e.lock_index as i64)
            .bind(e.create_index as i64)
            .bind(e.modify_index as i64)
            .bind(&e.key)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn delete_entry(&mut self, key: &str) -> Result<()> {
        let b = self.backend;
        b.query(&b.stmts.consul.delete_entry)
            .bind(key)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn lease(&mut self, name: &str, op: &Op, actor: &str) -> Result<Applied> {
        // Decided at the request's instant: a lock renewed with its session ends with it.
        let at = self.now().await?;
        self.backend
            .apply_in(&mut self.tx, name, op, actor, Some(at))
            .await
    }

    async fn notify(&mut self, key: &str) -> Result<()> {
        let b = self.backend;
        if let Some(sql) = &b.stmts.notify {
            b.query(sql).bind(key).execute(&mut *self.tx).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_bounds() {
        assert_eq!(prefix_end("a/"), Some("a0".to_string()));
        assert_eq!(prefix_end("ab"), Some("ac".to_string()));
        assert_eq!(prefix_end(""), None);
        assert_eq!(prefix_end("a\u{10FFFF}"), Some("b".to_string()));
        assert_eq!(prefix_end("\u{D7FF}"), Some("\u{E000}".to_string()));
        for key in ["a/", "a/b", "a/\u{10FFFF}x"] {
            assert!(key < prefix_end("a/").unwrap().as_str());
        }
    }
}
