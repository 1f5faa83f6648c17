//! The layers compiled into this build that keep tables of their own beside the lease's — each
//! a folder on the store's transaction seam (`backend/tx/`), each describing its tables as
//! data (a [`Schema`]) — and what must know them all: connecting a store (which creates their
//! tables, or checks them when it may not), `migrate`, `check_schema`, and the script printed
//! for a DBA ([`schema_script`]). This is the one place that names every layer: the store
//! underneath takes the list as a parameter and names none. A new layer adds one line to
//! [`LAYERS`].

use crate::backend::tx::Schema;
use crate::backend::{self, BackendKind, StoreOptions};
use crate::error::Result;
use crate::store::Store;

/// Every layer with tables of its own, as the cargo features compile them in.
const LAYERS: &[&Schema] = &[
    &crate::candidates::statements::SCHEMA,
    &crate::spread::statements::SCHEMA,
    #[cfg(feature = "consul")]
    &crate::consul::statements::SCHEMA,
    #[cfg(feature = "etcd")]
    &crate::etcd::statements::SCHEMA,
];

/// The DDL of every table this build uses — the lease's (what
/// [`Store::migrate`] runs, with its stored routines) and each compiled-in layer's — with
/// `prefix` on `kind`, for a DBA to apply by hand (`tenure migrate --print`), without
/// connecting.
///
/// # Errors
/// [`Error::Invalid`](crate::Error::Invalid) for a bad prefix,
/// [`Error::BackendNotCompiled`](crate::Error::BackendNotCompiled).
pub fn schema_script(kind: BackendKind, prefix: &str) -> Result<String> {
    let mut script = backend::lease_script(kind, prefix)?;
    for statement in LAYERS.iter().flat_map(|s| s.script(kind, prefix)) {
        script.push('\n');
        script.push_str(statement.trim());
        script.push_str(";\n");
    }
    Ok(script)
}

// Connecting, migrating and checking a store cover every layer's tables: these calls live
// here, beside the list, so that `store.rs` names no layer.
impl Store {
    /// Connects to `url` with default options (see [`backend::connect`]).
    ///
    /// # Errors
    /// As [`backend::connect`].
    pub async fn connect(url: &str) -> Result<Store> {
        Store::connect_with(url, StoreOptions::default()).await
    }

    /// Connects to `url` with `options`, and creates the tables of the lease and of every
    /// layer compiled in where they do not exist (or, with
    /// [`auto_create`](StoreOptions::auto_create) off, checks that they do).
    ///
    /// # Errors
    /// As [`backend::connect`], plus [`Error::SchemaMissing`](crate::Error::SchemaMissing)
    /// and [`Error::Timeout`](crate::Error::Timeout) if connecting (and creating the tables)
    /// takes longer than twice `options.timeout`, and at least 10 s.
    pub async fn connect_with(url: &str, options: StoreOptions) -> Result<Store> {
        Store::open(url, options, LAYERS).await
    }

    /// Creates the tables if they do not exist and records the schema version: the lease's
    /// and those of every layer compiled in (see [`schema_script`]).
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout), database errors.
    pub async fn migrate(&self) -> Result<()> {
        self.migrate_with(LAYERS).await
    }

    /// Checks that the tables exist with a schema version this build understands.
    ///
    /// # Errors
    /// [`Error::SchemaMissing`](crate::Error::SchemaMissing),
    /// [`Error::Timeout`](crate::Error::Timeout), database errors.
    pub async fn check_schema(&self) -> Result<()> {
        self.check_schema_with(LAYERS).await
    }
}
