//! etcd's lock and election recipes (`client/v3/concurrency`, served natively by etcd's
//! `v3lock` and `v3election`), in the library so that a server only wires them: each waiter
//! puts a key `name/<lease in hex>` with its lease, and the key with the lowest create revision
//! under `name/` holds the lock or leads. A waiter waits only for the key created just before
//! its own to go, following the log (see `wait.rs`), never polling blindly.
//!
//! A lock's fencing token is its key's create revision: [`fence_sql`](super::fence_sql)
//! checks it inside the application's own transaction.

mod cleanup;
mod election;
mod lock;
mod wait;

pub use election::Observer;

/// The TTL of the lease a lock or a campaign is given when it names none (etcd's session
/// default, 60 s; the lease is not kept alive, as etcd's servers leave it).
pub const SESSION_TTL: i64 = 60;
