//! The read and admin commands of `tenure` (`leader`, `status`, `candidates`, `watch`, `history`, `demote`,
//! `handover`, `pause`, `resume`, `migrate`, `fence-sql`), its default database and its
//! handling of bad input, as real processes on SQLite, PostgreSQL and MariaDB: one file per
//! command family, with the setup they share here.
//!
//! Leadership is set up through the library (`Store::apply`), never through `tenure run`, so
//! that these tests depend on the binary's read and admin paths only. Every test has its own
//! database: a fresh SQLite file, or a fresh table prefix on the servers.

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod bad_input;
mod candidates;
mod default_database;
mod fence_sql;
mod history;
mod leader;
mod migrate;
mod status;
mod watch;

use serde_json::Value;
use tenure::{Applied, Effect, Op, Store};

/// The ttl of the leases the tests set up: none ends while a test runs.
pub const TTL_MS: u64 = 30_000;

/// The fields of a lease in `status`, `watch` and the admin answers.
pub const LEASE_KEYS: [&str; 9] = [
    "name",
    "holder",
    "term",
    "since",
    "remaining_ms",
    "expires_at",
    "paused",
    "handover_to",
    "metadata",
];

/// A campaign of `who` that names no term: it acquires a vacant or expired lease.
pub async fn campaign(
    store: &Store,
    name: &str,
    who: &str,
    ttl_ms: u64,
    metadata: Option<&str>,
) -> Applied {
    let op = Op::Campaign {
        candidate: who.to_string(),
        term: None,
        ttl_ms,
        metadata: metadata.map(str::to_string),
        purpose: tenure::Purpose::Election,
    };
    store.apply(name, &op, who).await.expect("campaign")
}

/// The campaign of a holder that believes it holds `term`: the only kind that renews.
pub async fn renew(
    store: &Store,
    name: &str,
    who: &str,
    term: u64,
    metadata: Option<&str>,
) -> Applied {
    let op = Op::Campaign {
        candidate: who.to_string(),
        term: Some(term),
        ttl_ms: TTL_MS,
        metadata: metadata.map(str::to_string),
        purpose: tenure::Purpose::Election,
    };
    store.apply(name, &op, who).await.expect("campaign")
}

/// Whether the answer is an acquisition.
pub fn acquired(applied: &Applied) -> bool {
    matches!(applied.effect, Effect::Acquired { .. })
}

/// The term of the lease in the answer.
pub fn term(applied: &Applied) -> u64 {
    applied.lease.as_ref().expect("a lease").term
}

/// Panics unless `remaining` is a time left within (0, ttl].
pub fn assert_live_remaining(remaining: &Value, ttl_ms: u64) {
    let ms = remaining
        .as_u64()
        .unwrap_or_else(|| panic!("remaining_ms not a number: {remaining}"));
    assert!(
        ms > 0 && ms <= ttl_ms,
        "remaining_ms {ms} not in (0, {ttl_ms}]"
    );
}
