//! Which database to use, and connecting to it.

use crate::cli::Global;
use crate::exit::Failure;
use std::path::PathBuf;
use std::time::Duration;
use tenure::{RedactedUrl, Store, StoreOptions};

/// `$XDG_STATE_HOME/tenure/tenure.db`, else `~/.local/state/tenure/tenure.db`.
pub(crate) fn default_sqlite_path() -> Result<PathBuf, Failure> {
    let state = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    Failure::usage("neither XDG_STATE_HOME nor HOME is set; pass --database-url")
                })?;
            PathBuf::from(home).join(".local").join("state")
        }
    };
    Ok(state.join("tenure").join("tenure.db"))
}

/// The URL to use: `--database-url` / `TENURE_DATABASE_URL`, else the default SQLite file (its
/// directory is created).
pub(crate) fn url(global: &Global) -> Result<String, Failure> {
    if let Some(url) = &global.database_url {
        return Ok(url.clone());
    }
    let path = default_sqlite_path()?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| {
            Failure::usage(format!(
                "cannot create state directory {}: {e}",
                dir.display()
            ))
        })?;
    }
    Ok(format!("sqlite://{}", path.display()))
}

/// Connects, printing which database (password hidden) so that two terminals visibly share it.
pub(crate) async fn connect(global: &Global) -> Result<Store, Failure> {
    open(global, !global.no_create, None).await
}

/// As [`connect`], creating missing tables if `create`, and with `timeout` (default 5 s)
/// bounding each call (and how long the server lets a stalled session hold a lock).
pub(crate) async fn open(
    global: &Global,
    create: bool,
    timeout: Option<Duration>,
) -> Result<Store, Failure> {
    let url = url(global)?;
    if global.quiet == 0 {
        eprintln!("tenure: database {}", RedactedUrl::new(&url));
        if let Some(notify) = &global.notify_url {
            eprintln!("tenure: notifications from {}", RedactedUrl::new(notify));
        }
    }
    let mut options = StoreOptions::default()
        .table_prefix(global.table_prefix.clone())
        .auto_create(create);
    options.notify_url = global.notify_url.clone();
    let options = match timeout {
        Some(t) => options.timeout(t),
        None => options,
    };
    let store = Store::connect_with(&url, options).await?;
    OPENED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(store.clone());
    Ok(store)
}

/// Every store this process opened, for [`close_all`].
static OPENED: std::sync::Mutex<Vec<Store>> = std::sync::Mutex::new(Vec::new());

/// Closes every store this process opened and waits until their connections are closed: called
/// once the command has ended, so that nothing of tenure runs on behind it (SQLite's worker
/// threads end their spans only after answering, which must come before the trace exporter
/// shuts down). Bounded by [`CLOSE_WITHIN`]: closing waits for connections in use to come
/// back, and a call stuck on a hung server must not keep the process from exiting.
pub(crate) async fn close_all() {
    let opened = std::mem::take(
        &mut *OPENED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let closing = async {
        for store in opened {
            store.close().await;
        }
    };
    if tokio::time::timeout(CLOSE_WITHIN, closing).await.is_err() {
        tracing::debug!("the database connections did not close within {CLOSE_WITHIN:?}");
    }
}

/// How long [`close_all`] waits.
const CLOSE_WITHIN: Duration = Duration::from_secs(2);
