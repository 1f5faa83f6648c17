//! The scenarios: one fault each, the backends it applies to, and what the checker asserts.

use crate::checker::Expect;
use crate::target::Target;
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
    /// SIGKILL a random node (a lock workload has no one leader); its slot restarts at once.
    KillAny,
    /// SIGSTOP a random node for 2×ttl while its loops are "working", then SIGCONT (a
    /// spreading member paused past its ttl: its shards move, and it must notice on waking).
    PauseAny,
    /// `etcdctl lock` holders SIGKILLed inside their command's work: the whole holder
    /// (etcdctl and its command) or etcdctl alone, its command carrying on (`crate::etcd`).
    HolderKill,
    /// An `etcdctl lock` holder (etcdctl and its command) SIGSTOPped inside its work until
    /// another holder has written, past the lock's ttl, then SIGCONTed.
    HolderPause,
    /// One of two `tenure serve` SIGKILLed under connected `etcdctl lock` clients, which were
    /// given both endpoints, and started again.
    ServeKill,
}

/// What each node process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// One elector on the scenario's election name; two loops of writes while it leads.
    Elector,
    /// One `Locks` with several tasks churning a few lock names and a semaphore: a guard is
    /// released, dropped or forgotten and another task of the same process relocks at once
    /// (`node/locks.rs`).
    Locks,
    /// One member of a spreading group per process, writing under each shard it owns; members
    /// killed or paused come back and take their share again (`node/spread.rs`).
    Spread,
    /// Not a node's: `etcdctl lock` clients against `tenure serve --etcd-listen`, each
    /// holder's command writing under the fence of its lock key's revision (`crate::etcd`).
    EtcdLock,
    /// The same clients writing without the fence: the negative control.
    EtcdUnfenced,
}

impl Workload {
    /// Whether `etcdctl lock` clients run it rather than node processes (`crate::etcd`).
    pub fn is_etcd(self) -> bool {
        matches!(self, Workload::EtcdLock | Workload::EtcdUnfenced)
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub fault: Fault,
    pub workload: Workload,
    /// Every node (and every restarted incarnation) campaigns with one candidate / holder id.
    pub shared_id: bool,
    /// The elector of slot `i` campaigns with priority `i`: the last slot is preferred, so the
    /// fault hits the preferred leader, the next best takes over, and the preferred one's new
    /// incarnation takes the lead back by handover.
    pub priorities: bool,
}

const fn elector(name: &'static str, fault: Fault) -> Scenario {
    Scenario {
        name,
        fault,
        workload: Workload::Elector,
        shared_id: false,
        priorities: false,
    }
}

/// An elector scenario whose nodes have priorities (see [`Scenario::priorities`]).
const fn preferred(name: &'static str, fault: Fault) -> Scenario {
    Scenario {
        priorities: true,
        ..elector(name, fault)
    }
}

/// The scenarios that check one believer per lease at the client edge (a holder id shared by
/// tasks or processes): they run on every backend in `tenure-faults run`, and on SQLite in the
/// workspace test.
pub const CLIENT_EDGE: &[&str] = &["same-id", "locks", "locks-same-id"];

/// A spreading scenario: the group's members under `fault`.
const fn spread(name: &'static str, fault: Fault) -> Scenario {
    Scenario {
        name,
        fault,
        workload: Workload::Spread,
        shared_id: false,
        priorities: false,
    }
}

/// Every scenario, in the order they run.
pub const ALL: &[Scenario] = &[
    elector("kill", Fault::Kill),
    elector("pause", Fault::Pause),
    elector("starve", Fault::Starve),
    elector("proxy", Fault::Proxy),
    elector("sessions", Fault::Sessions),
    elector("restart", Fault::Restart),
    elector("clock", Fault::Clock),
    elector("stop-in-tx", Fault::StopInTransaction),
    // The preferred leader killed, paused, and cut off from the database (the proxy's faults).
    preferred("priority-kill", Fault::Kill),
    preferred("priority-pause", Fault::Pause),
    preferred("priority-proxy", Fault::Proxy),
    Scenario {
        name: "same-id",
        fault: Fault::Kill,
        workload: Workload::Elector,
        shared_id: true,
        priorities: false,
    },
    Scenario {
        name: "locks",
        fault: Fault::KillAny,
        workload: Workload::Locks,
        shared_id: false,
        priorities: false,
    },
    Scenario {
        name: "locks-same-id",
        fault: Fault::KillAny,
        workload: Workload::Locks,
        shared_id: true,
        priorities: false,
    },
    // Members of a spreading group killed (they rejoin at once) and paused past their ttl.
    spread("spread-kill", Fault::KillAny),
    spread("spread-pause", Fault::PauseAny),
    // etcd's API: `etcdctl lock` holders killed and paused past their ttl, a `tenure serve`
    // killed under its clients, and the negative control (no fence) that must be caught.
    etcd("etcd-lock-kill", Fault::HolderKill, Workload::EtcdLock),
    etcd("etcd-lock-pause", Fault::HolderPause, Workload::EtcdLock),
    etcd("etcd-serve-kill", Fault::ServeKill, Workload::EtcdLock),
    etcd("etcd-unfenced", Fault::HolderPause, Workload::EtcdUnfenced),
];

/// The names of the etcd scenarios, for `--only`.
pub const ETCD: &[&str] = &[
    "etcd-lock-kill",
    "etcd-lock-pause",
    "etcd-serve-kill",
    "etcd-unfenced",
];

/// An etcd scenario (`crate::etcd`).
const fn etcd(name: &'static str, fault: Fault, workload: Workload) -> Scenario {
    Scenario {
        name,
        fault,
        workload,
        shared_id: false,
        priorities: false,
    }
}

impl Scenario {
    /// Rounds every run makes, however short its duration: the proxy scenario goes through
    /// each of its five network faults once.
    pub fn min_rounds(&self) -> usize {
        match self.fault {
            Fault::Proxy => 5,
            // The whole holder and etcdctl alone; each of the two serves.
            Fault::HolderKill | Fault::ServeKill => 2,
            _ => 1,
        }
    }

    /// Whether the fault exists on this backend (SQLite has no network and no server). Through
    /// a transaction pooler only the faults of the nodes' processes run (kill, pause, starve,
    /// clock): the database-side ones would act on the pooler's server connections.
    pub fn applies_to(&self, target: &Target) -> bool {
        let kind = target.kind;
        if self.workload.is_etcd() {
            // `tenure serve` on the database itself (not through a transaction pooler).
            return !target.pooled;
        }
        if target.pooled {
            return matches!(
                self.fault,
                Fault::Kill
                    | Fault::KillAny
                    | Fault::Pause
                    | Fault::PauseAny
                    | Fault::Starve
                    | Fault::Clock
            );
        }
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
        let mut crash_bound = ttl + max_jitter + Duration::from_millis(500);
        if self.priorities {
            // A lower candidate holds off for a better live one for at most that one's renew
            // interval plus its database timeout after it was last seen (P6's one addition).
            if let Ok(timing) = tenure::Timing::from_ttl(ttl) {
                crash_bound += timing.renew_interval() + timing.db_timeout();
            }
        }
        let crash_bound = Some(crash_bound);
        match self.fault {
            Fault::Kill => Expect {
                exclusive: true,
                control_must_fail: false,
                fence_must_refuse: false,
                failover_bound: crash_bound,
            },
            Fault::Pause => Expect {
                exclusive: false,
                control_must_fail: true,
                fence_must_refuse: true,
                failover_bound: crash_bound,
            },
            // A paused member's shards move while it sleeps; it may wake inside a write. The
            // control may or may not catch that (the pause lands on one member of several).
            Fault::PauseAny => Expect::default(),
            Fault::Starve | Fault::StopInTransaction => Expect::default(),
            Fault::Clock => Expect {
                exclusive: kind != BackendKind::Sqlite,
                ..Expect::default()
            },
            // No pause, no clock fault: one believer per lease (per permit) at every moment.
            Fault::Proxy | Fault::Sessions | Fault::Restart | Fault::KillAny => Expect {
                exclusive: true,
                ..Expect::default()
            },
            // The fenced writes never land out of revision order (`crate::etcd`'s checker,
            // whatever the fault); a paused holder's write after its ttl is refused by the
            // fence, or, unfenced, caught.
            Fault::HolderKill | Fault::ServeKill => Expect::default(),
            Fault::HolderPause => Expect {
                control_must_fail: self.workload == Workload::EtcdUnfenced,
                fence_must_refuse: self.workload == Workload::EtcdLock,
                ..Expect::default()
            },
        }
    }
}
