//! A peer's figures: etcd or ZooKeeper, measured once per run (crash failover, handover, lock
//! cycles) and set beside every backend's rows.

use crate::report::{Summary, Throughput};

/// A peer's figures (etcd, ZooKeeper), measured once and set beside every backend's.
pub(crate) struct Peer {
    /// `etcd`, `ZooKeeper`.
    pub name: &'static str,
    /// What was measured, for the note under every table.
    pub about: String,
    /// How it elects, hands over and takes a lock, as the tables name it.
    pub elects: &'static str,
    pub hands_over: &'static str,
    pub locks: &'static str,
    pub crash: Option<Summary>,
    pub handover: Option<Summary>,
    pub locks1: Option<Throughput>,
    pub locks8: Option<Throughput>,
    /// A watch event after its put, in milliseconds (etcd only: the etcd API's rows).
    pub watch: Option<Summary>,
}

impl Peer {
    pub(crate) fn new(name: &'static str, elects: &'static str, hands_over: &'static str) -> Peer {
        Peer {
            name,
            about: String::new(),
            elects,
            hands_over,
            locks: "",
            crash: None,
            handover: None,
            locks1: None,
            locks8: None,
            watch: None,
        }
    }
}
