//! The seam's one implementation ([`Tx`] over one transaction of the store's pool) and the one
//! retry loop: every transaction tenure runs — a lease operation's and every feature's —
//! begins, runs, commits and, after a transient conflict, runs again here.

use super::backend::{Engine, SqlBackend};
use crate::backend::tx::{Arg, Body, Outcome, Row, Topic, Tx};
use crate::error::{is_duplicate_object, is_retryable, Error, Result};
use crate::model::{Clock, DbTime, Lease, Op, Standing};
use crate::records::Applied;
use sqlx::database::HasStatementCache;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Type};

use super::Dialect;

/// How many times a transaction is tried in all before a conflict is returned.
const ATTEMPTS: u32 = 8;

/// One transaction of the store's pool, as a [`Body`] sees it.
pub(in crate::backend) struct SqlTx<'b, E: Engine> {
    backend: &'b SqlBackend<E>,
    tx: sqlx::Transaction<'static, E::Database>,
    writes: bool,
    /// The transaction's instant and epoch, once read.
    clock: Option<Clock>,
    /// The last lease this transaction changed, to name it when a conflict aborts it.
    touched: Option<String>,
    /// What it did, for the engine to hear of once committed.
    committed: Committed,
}

/// A lease operation a transaction decided: what the engine hears of after the commit.
pub(in crate::backend) type Decided = (String, Op, Applied);

/// What a transaction that committed did, for the engine to tell other processes of.
#[derive(Debug, Default)]
pub(in crate::backend) struct Committed {
    /// The lease operations it decided.
    pub decided: Vec<Decided>,
    /// The topics it signalled ([`Tx::notify`]), in their wire form.
    pub topics: Vec<String>,
}

/// A row of a feature's query.
struct SqlRow<R>(R);

impl<R> Row for SqlRow<R>
where
    R: sqlx::Row + Send + Sync,
    for<'a> &'a str: ColumnIndex<R>,
    for<'a> i64: Decode<'a, R::Database> + Type<R::Database>,
    for<'a> String: Decode<'a, R::Database> + Type<R::Database>,
    for<'a> Vec<u8>: Decode<'a, R::Database> + Type<R::Database>,
    for<'a> bool: Decode<'a, R::Database> + Type<R::Database>,
{
    fn int(&self, column: &str) -> Result<i64> {
        Ok(self.0.try_get(column)?)
    }
    fn opt_int(&self, column: &str) -> Result<Option<i64>> {
        Ok(self.0.try_get(column)?)
    }
    fn text(&self, column: &str) -> Result<String> {
        Ok(self.0.try_get(column)?)
    }
    fn opt_text(&self, column: &str) -> Result<Option<String>> {
        Ok(self.0.try_get(column)?)
    }
    fn bytes(&self, column: &str) -> Result<Vec<u8>> {
        Ok(self.0.try_get(column)?)
    }
    fn boolean(&self, column: &str) -> Result<bool> {
        Ok(self.0.try_get(column)?)
    }
}

impl<E: Engine> SqlBackend<E>
where
    E::Database: HasStatementCache,
    <E::Database as Database>::Row: Send + Sync,
    for<'c> &'c mut <E::Database as Database>::Connection: Executor<'c, Database = E::Database>,
    for<'q> <E::Database as Database>::Arguments<'q>: IntoArguments<'q, E::Database>,
    for<'a> &'a str:
        ColumnIndex<<E::Database as Database>::Row> + Encode<'a, E::Database> + Type<E::Database>,
    for<'a> &'a [u8]: Encode<'a, E::Database> + Type<E::Database>,
    for<'a> Option<&'a str>: Encode<'a, E::Database>,
    for<'a> Option<i64>: Encode<'a, E::Database>,
    for<'a> String: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> Option<String>: Encode<'a, E::Database>,
    for<'a> i64: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> bool: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> Vec<u8>: Decode<'a, E::Database> + Type<E::Database>,
{
    /// Runs `body` in one transaction, again (up to [`ATTEMPTS`] times in all, after a short
    /// random pause) while it fails with a transient conflict: the one retry loop. A
    /// concurrent `CREATE … IF NOT EXISTS` counts as one (PostgreSQL answers the second
    /// creator "already exists": run again, and the table is there). Returns what the
    /// transaction that committed did (nothing if it rolled back).
    pub(in crate::backend) async fn run_body(&self, body: &mut dyn Body) -> Result<Committed> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut touched = None;
            match self.run_body_once(body, &mut touched).await {
                Err(Error::Database(e))
                    if attempt < ATTEMPTS && (is_retryable(&e) || is_duplicate_object(&e)) =>
                {
                    let name = touched.as_deref().unwrap_or_default();
                    tracing::debug!(name, error = %e, "transient conflict; retrying");
                    self.engine.conflict(name, &e);
                    let pause = rand::random::<u64>() % (2 * u64::from(attempt) + 1);
                    tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                }
                other => return other,
            }
        }
    }

    async fn run_body_once(
        &self,
        body: &mut dyn Body,
        touched: &mut Option<String>,
    ) -> Result<Committed> {
        let writes = body.writes();
        // Behind a transaction pooler every transaction carries the store's settings.
        let tx = if writes || self.pooled {
            self.pool.begin_with(self.engine.begin()).await?
        } else {
            self.pool.begin().await?
        };
        let mut sql_tx = SqlTx {
            backend: self,
            tx,
            writes,
            clock: None,
            touched: None,
            committed: Committed::default(),
        };
        let outcome = body.run(&mut sql_tx).await;
        *touched = sql_tx.touched.take();
        match outcome? {
            Outcome::Commit => {
                sql_tx.tx.commit().await?;
                Ok(sql_tx.committed)
            }
            Outcome::Rollback => {
                sql_tx.tx.rollback().await?;
                Ok(Committed::default())
            }
        }
    }
}

#[async_trait::async_trait]
impl<E: Engine> Tx for SqlTx<'_, E>
where
    E::Database: HasStatementCache,
    <E::Database as Database>::Row: Send + Sync,
    for<'c> &'c mut <E::Database as Database>::Connection: Executor<'c, Database = E::Database>,
    for<'q> <E::Database as Database>::Arguments<'q>: IntoArguments<'q, E::Database>,
    for<'a> &'a str:
        ColumnIndex<<E::Database as Database>::Row> + Encode<'a, E::Database> + Type<E::Database>,
    for<'a> &'a [u8]: Encode<'a, E::Database> + Type<E::Database>,
    for<'a> Option<&'a str>: Encode<'a, E::Database>,
    for<'a> Option<i64>: Encode<'a, E::Database>,
    for<'a> String: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> Option<String>: Encode<'a, E::Database>,
    for<'a> i64: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> bool: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> Vec<u8>: Decode<'a, E::Database> + Type<E::Database>,
{
    fn kind(&self) -> crate::backend::BackendKind {
        E::KIND
    }

    fn dialect(&self) -> &Dialect {
        self.backend.stmts.dialect()
    }

    fn prefix(&self) -> &str {
        &self.backend.stmts.prefix
    }

    async fn now(&mut self) -> Result<DbTime> {
        if let Some(clock) = self.clock {
            return Ok(clock.now);
        }
        let b = self.backend;
        // A writer checks (where the dialect must) that the server takes writes, and reads the
        // epoch its lease operations mint terms in.
        let clock = if self.writes {
            let row = b.query(&b.stmts.now).fetch_one(&mut *self.tx).await?;
            b.clock_in(&mut self.tx, &row).await?
        } else {
            let row = b.query(&b.stmts.clock).fetch_one(&mut *self.tx).await?;
            Clock::from(DbTime(sqlx::Row::try_get(&row, "now_us")?))
        };
        self.clock = Some(clock);
        Ok(clock.now)
    }

    async fn epoch(&mut self) -> Result<crate::model::Epoch> {
        self.now().await?;
        Ok(self.clock.map(|clock| clock.epoch).unwrap_or_default())
    }

    async fn lease(
        &mut self,
        name: &str,
        op: &Op,
        actor: &str,
        standing: Option<&Standing<'_>>,
    ) -> Result<Applied> {
        debug_assert!(
            self.writes,
            "a lease operation in a body that does not write"
        );
        // The transaction's instant and epoch if it has them; else the clock after the row
        // lock, which becomes the transaction's.
        let applied = self
            .backend
            .apply_in(&mut self.tx, name, op, actor, self.clock, standing)
            .await?;
        self.clock.get_or_insert(Clock {
            now: applied.now,
            epoch: applied.epoch,
        });
        self.touched = Some(name.to_string());
        self.committed
            .decided
            .push((name.to_string(), op.clone(), applied.clone()));
        Ok(applied)
    }

    async fn leases(&mut self, ops: &[(&str, Op)], actor: &str) -> Result<Vec<Applied>> {
        debug_assert!(
            self.writes,
            "lease operations in a body that does not write"
        );
        self.now().await?;
        let clock = self.clock.expect("read by now()");
        let applied = self
            .backend
            .apply_many_in(&mut self.tx, ops, actor, clock)
            .await?;
        if let Some((name, _)) = ops.first() {
            self.touched = Some((*name).to_string());
        }
        for ((name, op), applied) in ops.iter().zip(&applied) {
            self.committed
                .decided
                .push(((*name).to_string(), op.clone(), applied.clone()));
        }
        Ok(applied)
    }

    async fn read_lease(&mut self, name: &str) -> Result<Option<Lease>> {
        let b = self.backend;
        let rows = b
            .query(&b.stmts.get_row)
            .bind(name)
            .fetch_all(&mut *self.tx)
            .await?;
        Ok(b.snapshot_from(&rows)?.leases.pop())
    }

    async fn notify(&mut self, topic: Topic<'_>) -> Result<()> {
        let b = self.backend;
        let payload = topic.encode();
        if let Some(sql) = &b.stmts.notify {
            b.query(sql).bind(&payload).execute(&mut *self.tx).await?;
        }
        self.notified(topic);
        Ok(())
    }

    fn notified(&mut self, topic: Topic<'_>) {
        let payload = topic.encode();
        if !self.committed.topics.contains(&payload) {
            self.committed.topics.push(payload);
        }
    }

    async fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<()> {
        bind(self.backend.query(sql), args)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn fetch_clocked(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Box<dyn Row>>> {
        debug_assert!(
            self.writes,
            "a clocked row lock in a body that does not write"
        );
        let b = self.backend;
        let rows = bind(b.query(sql), args).fetch_all(&mut *self.tx).await?;
        if let (None, Some(row)) = (self.clock, rows.first()) {
            self.clock = Some(b.clock_in(&mut self.tx, row).await?);
        }
        Ok(boxed(rows))
    }

    async fn fetch(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Box<dyn Row>>> {
        let rows = bind(self.backend.query(sql), args)
            .fetch_all(&mut *self.tx)
            .await?;
        Ok(boxed(rows))
    }
}

/// A query's rows, as a body sees them.
fn boxed<R: 'static>(rows: Vec<R>) -> Vec<Box<dyn Row>>
where
    SqlRow<R>: Row,
{
    rows.into_iter()
        .map(|row| Box::new(SqlRow(row)) as Box<dyn Row>)
        .collect()
}

/// `query` with `args` bound in order.
fn bind<'q, DB>(
    mut query: sqlx::query::Query<'q, DB, <DB as Database>::Arguments<'q>>,
    args: &[Arg<'q>],
) -> sqlx::query::Query<'q, DB, <DB as Database>::Arguments<'q>>
where
    DB: Database,
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> &'a [u8]: Encode<'a, DB> + Type<DB>,
    for<'a> Option<&'a str>: Encode<'a, DB>,
    for<'a> i64: Encode<'a, DB> + Type<DB>,
    for<'a> Option<i64>: Encode<'a, DB>,
    for<'a> bool: Encode<'a, DB> + Type<DB>,
{
    for arg in args {
        query = match *arg {
            Arg::Int(v) => query.bind(v),
            Arg::OptInt(v) => query.bind(v),
            Arg::Text(v) => query.bind(v),
            Arg::OptText(v) => query.bind(v),
            Arg::Bytes(v) => query.bind(v),
            Arg::Bool(v) => query.bind(v),
        };
    }
    query
}
