//! The Rust `etcd-client` crate (its KV, lease, watch, lock and election clients) against
//! `tenure serve --etcd-listen`, side by side with a real etcd (`tests/support/etcd/`), on
//! SQLite, PostgreSQL and MariaDB. `MODULE::etcd::NAME` runs a scenario on the real etcd
//! alone.

mod support;

#[path = "etcd/rust_kv.rs"]
mod kv;
#[path = "etcd/rust_leases.rs"]
mod leases;
#[path = "etcd/rust_recipes.rs"]
mod recipes;
#[path = "etcd/rust_watch.rs"]
mod watch;
