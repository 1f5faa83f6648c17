//! The scenarios: one fault each, the backends it applies to, and what the checker asserts.

use crate::checker::Expect;
use std::time::Duration;
use tenure::BackendKind;

/// The fault a scenario injects, round after round, into the current leader (or everyone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL the leader; a new incarnation of its slot starts after the failover.
    Kill,
    /// SIGSTOP the leader for 2×ttl while its negative-control loop is "working", then SIGCONT.
    Pause,
    /// Pin the leader to one CPU at nice 19 beside four busy loops for 2×ttl.
    Starve,
    /// A TCP proxy between each node and the database; the leader's suffers, in turn, latency
    /// beyond the renew budget, a black hole, resets, a cut after a forwarded request and
    /// one-way loss.
    Proxy,
    /// Every session on the suite's database killed every 200 ms for 2×ttl.
    Sessions,
    /// The database server stopped for one ttl and started again.
    Restart,
    /// Every node's wall clock jumped by hours (libfaketime; monotonic time untouched).
    Clock,
    /// SQLite: the leader stops itself (SIGSTOP) inside its fenced write transaction.
    StopInTransaction,
}

#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub fault: Fault,
}

/// Every scenario, in the order they run.
pub const ALL: &[Scenario] = &[
    Scenario {
        name: "kill",
        fault: Fault::Kill,
    },
    Scenario {
        name: "pause",
        fault: Fault::Pause,
    },
    Scenario {
        name: "starve",
        fault: Fault::Starve,
    },
    Scenario {
        name: "proxy",
        fault: Fault::Proxy,
    },
    Scenario {
        name: "sessions",
        fault: Fault::Sessions,
    },
    Scenario {
        name: "restart",
        fault: Fault::Restart,
    },
    Scenario {
        name: "clock",
        fault: Fault::Clock,
    },
    Scenario {
        name: "stop-in-tx",
        fault: Fault::StopInTransaction,
    },
];

impl Scenario {
    /// Rounds every run makes, however short its duration: the proxy scenario goes through
    /// each of its five network faults once.
    pub fn min_rounds(&self) -> usize {
        if self.fault == Fault::Proxy {
            5
        } else {
            1
        }
    }

    /// Whether the fault exists on this backend (SQLite has no network and no server).
    pub fn applies_to(&self, kind: BackendKind) -> bool {
        match self.fault {
            Fault::Proxy | Fault::Sessions | Fault::Restart => kind != BackendKind::Sqlite,
            Fault::StopInTransaction => kind == BackendKind::Sqlite,
            _ => true,
        }
    }

    /// What the checker asserts. I2 (no overlap) rests on P3's assumptions: no pause longer
    /// than the margin and a healthy database clock. A pause or starvation breaks the first;
    /// on SQLite the host's wall clock *is* the database clock, so a clock jump breaks the
    /// second there. The fenced resource (I3), terms (I1) and I4 hold in every scenario.
    pub fn expect(&self, kind: BackendKind, ttl: Duration, max_jitter: Duration) -> Expect {
        let crash_bound = Some(ttl + max_jitter + Duration::from_millis(500));
        match self.fault {
            Fault::Kill => Expect {
                exclusive: true,
                control_must_fail: false,
                failover_bound: crash_bound,
            },
            Fault::Pause => Expect {
                exclusive: false,
                control_must_fail: true,
                failover_bound: crash_bound,
            },
            Fault::Starve | Fault::StopInTransaction => Expect::default(),
            Fault::Clock => Expect {
                exclusive: kind != BackendKind::Sqlite,
                ..Expect::default()
            },
            Fault::Proxy | Fault::Sessions | Fault::Restart => Expect {
                exclusive: true,
                ..Expect::default()
            },
        }
    }
}
