//! A layer's revision counter: one row of a table of the layer's own, which every writing
//! transaction of the layer takes first. Taking it serializes the layer's writers, so the
//! values it hands out are gapless and commit in order: a reader that has seen N never later
//! sees a commit below N (a key-value layer's index, a revision).
//!
//! A promotion can lose the old primary's last commits, and with them the last values the
//! counter handed out: [`Counter::next_in_epoch`] starts a new epoch of the database at the
//! epoch's floor, above every value the old primary could have handed out (as terms do in
//! their [`Epoch`](crate::model::Epoch)), so that a value is never handed out twice.

use super::ddl::{Column, Kind, Table};
use super::int::{bigint, unsigned};
use super::{Arg, Dialect, Tx};
use crate::error::Result;

/// A counter's columns: one row per counter (`id`; a layer's first is 1), its value in `idx`.
const COLUMNS: &[Column] = &[Column::new("id", Kind::Int), Column::new("idx", Kind::Int)];

/// The table of one counter, named by the layer.
pub const fn table(name: &'static str) -> Table {
    Table {
        name,
        columns: COLUMNS,
        primary_key: &["id"],
        indexes: &[],
    }
}

/// The statements of one counter (a row of its table), with the store's prefix in the table's
/// name.
#[derive(Debug)]
pub struct Counter {
    table: String,
    lock: String,
    read: String,
    insert: String,
    set: String,
    /// Adds one and answers the new value in one statement, where `UPDATE … RETURNING` exists.
    bump: Option<String>,
    /// `bump` that also reads the writer's clock after the row's lock, in one round trip
    /// ([`Dialect::clocked_bump`]), where the engine can.
    bump_clocked: Option<String>,
}

impl Counter {
    /// The counter kept in `table` (as [`table`] describes it), with `prefix`: its row 1.
    pub fn new(table: &Table, prefix: &str, d: &Dialect) -> Counter {
        Counter::row(table, 1, prefix, d)
    }

    /// The counter kept in row `id` of `table`: a layer that keeps several (the index of
    /// each of its tables beside its revision) keeps them in one table.
    pub fn row(table: &Table, id: u8, prefix: &str, d: &Dialect) -> Counter {
        let name = table.named(prefix);
        let bump = d
            .update_returning
            .then(|| format!("UPDATE {name} SET idx = idx + 1 WHERE id = {id} RETURNING idx"));
        Counter {
            lock: format!("SELECT idx FROM {name} WHERE id = {id} {}", d.for_update),
            read: format!("SELECT idx FROM {name} WHERE id = {id}"),
            insert: format!("INSERT INTO {name} (id, idx) VALUES ({id}, 0)"),
            set: format!("UPDATE {name} SET idx = {} WHERE id = {id}", (d.param)(1)),
            bump_clocked: d.clocked_bump(&name, id),
            bump,
            table: name,
        }
    }

    /// Locks the counter's row until the end of the transaction and reads it (0 the first
    /// time: the row is created, and a concurrent creator's unique violation is a conflict the
    /// seam runs the body again after).
    ///
    /// # Errors
    /// Database errors; [`Error::Corrupt`](crate::Error::Corrupt) for a negative value.
    pub async fn lock(&self, tx: &mut dyn Tx) -> Result<u64> {
        if let Some(row) = tx.fetch(&self.lock, &[]).await?.first() {
            return unsigned(&self.table, "index", row.int("idx")?);
        }
        tx.execute(&self.insert, &[]).await?;
        let rows = tx.fetch(&self.lock, &[]).await?;
        let row = rows.first().ok_or(sqlx::Error::RowNotFound)?;
        unsigned(&self.table, "index", row.int("idx")?)
    }

    /// Its value, without a lock (0 before the first write).
    ///
    /// # Errors
    /// Database errors; [`Error::Corrupt`](crate::Error::Corrupt) for a negative value.
    pub async fn read(&self, tx: &mut dyn Tx) -> Result<u64> {
        match tx.fetch(&self.read, &[]).await?.first() {
            Some(row) => unsigned(&self.table, "index", row.int("idx")?),
            None => Ok(0),
        }
    }

    /// Sets it (after [`lock`](Counter::lock) of it, in the same transaction, which creates its
    /// row the first time).
    ///
    /// # Errors
    /// Database errors; [`Error::Invalid`](crate::Error::Invalid) beyond a `BIGINT`.
    pub async fn set(&self, tx: &mut dyn Tx, value: u64) -> Result<()> {
        tx.execute(&self.set, &[Arg::Int(bigint("index", value)?)])
            .await
    }

    /// Locks it and moves it to the next value of the transaction's epoch: one more, or the
    /// epoch's floor where that is higher (the first write after a promotion, whose new epoch
    /// lies above every value the old primary handed out, lost commits included). The
    /// transaction's clock is read after the lock (as [`Tx::now`] is for writers), and the
    /// row is written twice only at the start of an epoch. Returns the value it found and
    /// the one it moved to (a write that then changes nothing sets the found one back).
    ///
    /// Above every value of an earlier epoch as long as that epoch handed out fewer values than
    /// the space between the floors: 2⁴⁰ per PostgreSQL timeline; on MySQL/MariaDB, fewer than
    /// the microseconds its primary wrote for (the assumption terms make there).
    ///
    /// # Errors
    /// As [`next`](Counter::next); reading the epoch's clock.
    pub async fn next_in_epoch(&self, tx: &mut dyn Tx) -> Result<(u64, u64)> {
        // The lock, the new value and the clock in one round trip where the engine can.
        let clocked = match &self.bump_clocked {
            Some(sql) => tx
                .fetch_clocked(sql, &[])
                .await?
                .first()
                .map(|row| row.int("idx")),
            None => None,
        };
        let next = match clocked {
            Some(idx) => unsigned(&self.table, "index", idx?)?,
            None => self.next(tx).await?,
        };
        // `next` is at least 1: one more than the value it found.
        let found = next - 1;
        let floor = tx.epoch().await?.floor();
        if next >= floor {
            return Ok((found, next));
        }
        self.set(tx, floor).await?;
        Ok((found, floor))
    }

    /// Locks it and adds one: the value this transaction writes at.
    ///
    /// # Errors
    /// As [`lock`](Counter::lock) and [`set`](Counter::set).
    pub async fn next(&self, tx: &mut dyn Tx) -> Result<u64> {
        if let Some(bump) = &self.bump {
            // The row's lock and its new value in one round trip (none the first time: the
            // row is created below).
            if let Some(row) = tx.fetch(bump, &[]).await?.first() {
                return unsigned(&self.table, "index", row.int("idx")?);
            }
        }
        let next = self.lock(tx).await? + 1;
        self.set(tx, next).await?;
        Ok(next)
    }
}
