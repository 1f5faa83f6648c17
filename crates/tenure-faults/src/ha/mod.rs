//! The `ha` profile: tenure on a highly available database. A private Patroni cluster (three
//! PostgreSQL instances, etcd, HAProxy routing to the primary), Galera cluster or MariaDB
//! primary with an asynchronous replica is built for each scenario; the tenure nodes point at HAProxy; the nemesis hits the *database* (its
//! primary killed, a switchover, a failover that loses commits) while a tenure leader renews;
//! the checker tests the history as in every other scenario. See `docs/safety.md`.
//!
//! Each scenario measures two failover times from the fault's start: the database's (the first
//! write through HAProxy that commits on another member) and tenure's (the first tenure gained
//! after the fault).
//!
//! # Layout
//!
//! - [`scenario`]: the scenarios, the fault and cluster of each, and how an outcome is judged.
//! - `drive`: one scenario from start to end, the cluster built (once more if need be), the
//!   nodes started, the fault driven by `failover`, [`readonly`] or [`spread`], the history
//!   checked.
//! - `failover`: the failover scenarios (kill, switchover, partition, lossy failover).
//! - `etcd_lock`: the etcd workload (`etcdctl lock` on `tenure serve`) through an asynchronous
//!   Patroni failover that loses commits; [`etcd_revisions`]: what it checks beyond the
//!   register.
//! - `on_tenure`: Patroni *on* tenure: a cluster whose DCS is `tenure serve` ([`dcs`]).
//! - [`readonly`]: never lead from a read-only server (a Patroni replica, a MariaDB with
//!   `read_only`).
//! - [`spread`]: what tenure says about Galera (writes spread across nodes).
//! - `database`: Patroni, Galera or the MariaDB pair behind one face, and the database's failover time.
//! - [`patroni`], [`galera`], [`replication`]: the three harnesses (the last a MariaDB
//!   primary and its asynchronous replica); [`cluster`]: what they share (their private
//!   directory, HAProxy, proxies, waiting with a bound, the write probe, teardown);
//!   [`procs`]: processes, ports, a small HTTP client.
//! - `report`: the table and the notes the command prints.

pub mod cluster;
mod database;
pub mod dcs;
mod drive;
mod etcd_lock;
pub mod etcd_revisions;
mod failover;
pub mod galera;
mod on_tenure;
pub mod patroni;
pub mod procs;
pub mod readonly;
pub mod replication;
mod report;
pub mod scenario;
pub mod spread;

pub use drive::{run_all, SCENARIO_LIMIT};
pub use report::{details, table};
pub use scenario::{missing, ClusterKind, DbFault, HaOutcome, HaScenario, ALL};
