//! Where a scenario runs: a backend and its URL. Below both the scenarios (which say where
//! their fault applies) and the runner (which starts nodes there).

use tenure::BackendKind;

/// Where a scenario runs.
#[derive(Clone, Debug)]
pub struct Target {
    pub kind: BackendKind,
    /// The suite's own database on a server, or (SQLite) ignored: each run gets its own file.
    pub url: String,
    /// PostgreSQL through a transaction-mode pooler (PgBouncer; `?pooler=transaction`).
    pub pooled: bool,
}
