//! etcd's own clients against `tenure serve --etcd-listen`, side by side with a real etcd
//! (Debian's etcd-server 3.4 on free loopback ports; `tests/support/etcd.rs`): the same
//! requests against both, the transcripts compared, on SQLite, PostgreSQL and MariaDB.
//!
//! - `etcdctl`: Debian's etcdctl 3.4 — put/get/del, txn, lease, watch, lock, elect, members;
//! - `gateway`: etcd's JSON gateway as Patroni's `etcd3` DCS and curl use it;
//! - `python`: Debian's python3-etcd3 (under /usr/bin/python3);
//! - `go`: Go's clientv3 and its `concurrency` package (Mutex, Election, Session), from
//!   Debian's golang-etcd-server-dev 3.4, built by the test with Debian's Go;
//! - `auth`: etcdctl and the gateway with authentication on (tenure's `--token-file`).
//!
//! `etcd::NAME` runs a scenario on the real etcd alone; `sqlite::NAME` … compare.

mod support;

// Four tests at once: each waits on real etcd, its clients and tenure serve (60 tests: 63 s
// two at a time, 35 s four at a time, quiet).
tests_at_once!(4);

#[path = "etcd/auth.rs"]
mod auth;

#[path = "etcd/etcdctl.rs"]
mod etcdctl;
#[path = "etcd/gateway.rs"]
mod gateway;
#[path = "etcd/go.rs"]
mod go;
#[path = "etcd/python.rs"]
mod python;
