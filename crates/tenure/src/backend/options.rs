//! Options that apply to every backend.

use crate::backend::RedactedUrl;
use crate::error::Result;
use crate::validate;
use std::fmt;
use std::time::Duration;

/// How a [`Store`](crate::Store) connects and where it keeps its tables.
#[derive(Clone)]
pub struct StoreOptions {
    /// Prefix of the table names (`<prefix>lease`, `<prefix>history`, `<prefix>tick`,
    /// `<prefix>schema`, on MySQL/MariaDB `<prefix>epoch`, and those of the layers compiled
    /// in: `tenure::schema_script` prints them all).
    /// Default `tenure_`; must match `^[A-Za-z_][A-Za-z0-9_]{0,40}$`.
    pub table_prefix: String,
    /// Create the tables on first use (`IF NOT EXISTS`). Turn off where the user has no DDL
    /// rights; then a missing table is [`Error::SchemaMissing`](crate::Error::SchemaMissing).
    pub auto_create: bool,
    /// History rows older than this are deleted, lazily: at every 64th tenure of a name and at
    /// every administrative event (demote, handover, pause, resume) of it, so a name keeps at
    /// most 64 tenures' events beyond this. `None` keeps everything. Default 30 days.
    pub history_retention: Option<Duration>,
    /// Bound on connecting and on each call made through [`Store`](crate::Store).
    pub timeout: Duration,
    /// Connections in the pool (PostgreSQL also holds one more for LISTEN, unless
    /// [`notify_url`](StoreOptions::notify_url) is set).
    pub max_connections: u32,
    /// PostgreSQL: a direct URL (no transaction-mode pooler in between) on which to LISTEN for
    /// lease changes, so that followers are woken at once on a release, demote, handover or
    /// resume. Needed for push notifications when the database URL goes through a
    /// transaction-mode pooler (`?pooler=transaction`), where LISTEN cannot work: without it
    /// followers poll, every renew interval. Unreachable, or not PostgreSQL: connecting fails.
    /// Default `None`: LISTEN on the database URL itself, unless it names a transaction pooler.
    pub notify_url: Option<String>,
    /// Mint terms in the database's epochs (always, but in a fault suite's negative control).
    pub(crate) epochs: bool,
}

impl fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreOptions")
            .field("table_prefix", &self.table_prefix)
            .field("auto_create", &self.auto_create)
            .field("history_retention", &self.history_retention)
            .field("timeout", &self.timeout)
            .field("max_connections", &self.max_connections)
            .field(
                "notify_url",
                &self.notify_url.as_deref().map(RedactedUrl::new),
            )
            .field("epochs", &self.epochs)
            .finish()
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            table_prefix: "tenure_".to_string(),
            auto_create: true,
            history_retention: Some(Duration::from_secs(30 * 24 * 3600)),
            timeout: Duration::from_secs(5),
            max_connections: 8,
            notify_url: None,
            epochs: true,
        }
    }
}

impl StoreOptions {
    /// Sets the table prefix.
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// Turns automatic table creation on or off.
    pub fn auto_create(mut self, on: bool) -> Self {
        self.auto_create = on;
        self
    }

    /// Sets the history retention (`None`: keep forever).
    pub fn history_retention(mut self, keep: Option<Duration>) -> Self {
        self.history_retention = keep;
        self
    }

    /// Mints every term in epoch zero, as tenure did before epochs: unsafe across an
    /// asynchronous failover (a term can repeat). Only for the negative control of tenure's own
    /// fault suite, which must show that it catches that (`testing` feature).
    #[cfg(feature = "testing")]
    pub fn without_epochs(mut self) -> Self {
        self.epochs = false;
        self
    }

    /// Sets the per-call timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the direct PostgreSQL URL to LISTEN on (see
    /// [`notify_url`](StoreOptions::notify_url)).
    pub fn notify_url(mut self, url: impl Into<String>) -> Self {
        self.notify_url = Some(url.into());
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        validate::table_prefix(&self.table_prefix)?;
        if let Some(keep) = self.history_retention {
            validate::duration_ms("history retention", keep)?;
        }
        Ok(())
    }

    pub(crate) fn retention_us(&self) -> Option<i64> {
        self.history_retention
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn debug_hides_the_notify_password() {
        let options = super::StoreOptions::default().notify_url("postgres://u:s3cret@db/x");
        let shown = format!("{options:?}");
        assert!(
            !shown.contains("s3cret") && shown.contains("u:***@db"),
            "{shown}"
        );
    }
}
