//! The scenarios of the `ha` profile: the fault each injects into the database, the cluster
//! it builds, and how its outcome is judged (the negative control must be caught; every
//! other scenario must hold every invariant).

use super::{galera, patroni, replication};
use crate::checker::{Expect, Verdict};
use std::path::PathBuf;
use std::time::Duration;

/// What the nemesis does to the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DbFault {
    /// SIGKILL the primary member whole (Patroni, PostgreSQL and its children) while a tenure
    /// leader renews: Patroni fails over after its ttl.
    KillPrimary,
    /// A switchover by Patroni (`POST /switchover`) to a replica (in synchronous mode, the
    /// synchronous standby).
    Switchover,
    /// A partition of the primary (clients, WAL stream and etcd; not its REST API) while a
    /// tenure leader renews: Patroni demotes it and promotes a replica; the partition heals
    /// after tenure has a new leader.
    Partition,
    /// The lossy failover: the primary's WAL stream is cut (on MariaDB: the replica's SQL
    /// thread stopped), the tenure leader is killed so that a new tenure begins on the primary
    /// alone, then the primary is killed and a replica promoted (by Patroni; on MariaDB as
    /// orchestrator would). With asynchronous replication the new tenure's commit is lost: the
    /// promoted replica's epoch puts the next term above it, and with epochs switched off the
    /// term is handed out again (the negative control); with synchronous replication it never
    /// commits.
    LossyFailover,
    /// The nodes point straight at a replica (not HAProxy): they must not lead, and say
    /// "read-only"; a switchover promotes it and they lead; a second switchover demotes it
    /// under its leader, which steps down by its deadline.
    Standby,
    /// The nodes point at one MariaDB after `SET GLOBAL read_only = 1`: the same three steps,
    /// with `read_only = 0` and `1` again.
    ReadOnly,
    /// Galera with each tenure node on its own member (the lock workload): writes spread
    /// across nodes, which tenure must warn about (`spread.rs`). The checker is not asserted:
    /// the premise, one writer node, is broken on purpose.
    Spread,
    /// Patroni *on* tenure (`on_tenure.rs`): no tenure nodes; the cluster's DCS is `tenure
    /// serve`, and the tour (bootstrap, idle, switchover, the leader killed, `tenure serve`
    /// killed and restarted) must never show two running primaries.
    OnTenure,
    /// `etcdctl lock` holders against `tenure serve --etcd-listen` on the database, each
    /// holder's command writing a register under the lock's fence (`etcd_lock.rs`): the WAL
    /// stream cut, a lock taken and written under on the primary alone, the primary's clients
    /// cut and it killed, a replica promoted that lost those commits. The register's kept
    /// writes must never go down in revision, and no revision may be handed out twice.
    EtcdLock,
}

/// The database cluster a scenario builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterKind {
    /// Patroni with `synchronous_mode: true`.
    PatroniSync,
    /// Patroni with `synchronous_mode: false`.
    PatroniAsync,
    /// A MariaDB primary and a replica with asynchronous binlog replication, promoted as
    /// orchestrator would.
    MariaDbAsync,
    /// MariaDB Galera, HAProxy sending everything to the first available node.
    Galera,
    /// One MariaDB server (a one-node Galera, built the same way).
    MariaDb,
    /// Patroni (asynchronous) whose DCS is `tenure serve`'s Consul API with its defaults.
    PatroniOnConsul,
    /// The same with `--session-ttl-min 5s`: Patroni's `ttl: 10` kept as it asked.
    PatroniOnConsulShort,
    /// Patroni (asynchronous) whose DCS is `tenure serve`'s etcd API (Patroni's `etcd3`).
    PatroniOnEtcd,
}

#[derive(Clone, Copy, Debug)]
pub struct HaScenario {
    pub name: &'static str,
    pub fault: DbFault,
    pub cluster: ClusterKind,
    /// The checker must find a term violation (I1): the nodes run with epochs switched off
    /// (`--no-epochs`) through a failover that loses commits.
    pub negative_control: bool,
}

impl HaScenario {
    const fn new(name: &'static str, fault: DbFault, cluster: ClusterKind) -> HaScenario {
        HaScenario {
            name,
            fault,
            cluster,
            negative_control: false,
        }
    }

    /// The same scenario as a negative control, with epochs switched off.
    const fn without_epochs(self) -> HaScenario {
        HaScenario {
            negative_control: true,
            ..self
        }
    }

    /// Whether the nodes mint terms in the database's epochs (all but the controls).
    pub fn epochs(&self) -> bool {
        !self.negative_control
    }
}

/// Every scenario of the profile, in order.
pub const ALL: &[HaScenario] = &[
    HaScenario::new(
        "kill-primary",
        DbFault::KillPrimary,
        ClusterKind::PatroniSync,
    ),
    HaScenario::new("switchover", DbFault::Switchover, ClusterKind::PatroniSync),
    HaScenario::new("partition", DbFault::Partition, ClusterKind::PatroniSync),
    HaScenario::new(
        "lossy-failover",
        DbFault::LossyFailover,
        ClusterKind::PatroniSync,
    ),
    HaScenario::new(
        "lossy-failover",
        DbFault::LossyFailover,
        ClusterKind::PatroniAsync,
    ),
    HaScenario::new(
        "lossy-failover",
        DbFault::LossyFailover,
        ClusterKind::PatroniAsync,
    )
    .without_epochs(),
    HaScenario::new(
        "async-failover",
        DbFault::LossyFailover,
        ClusterKind::MariaDbAsync,
    ),
    HaScenario::new(
        "async-failover",
        DbFault::LossyFailover,
        ClusterKind::MariaDbAsync,
    )
    .without_epochs(),
    HaScenario::new(
        "etcd-lock-failover",
        DbFault::EtcdLock,
        ClusterKind::PatroniAsync,
    ),
    HaScenario::new("kill-primary", DbFault::KillPrimary, ClusterKind::Galera),
    HaScenario::new("switchover", DbFault::Switchover, ClusterKind::Galera),
    HaScenario::new("partition", DbFault::Partition, ClusterKind::Galera),
    HaScenario::new("standby", DbFault::Standby, ClusterKind::PatroniSync),
    HaScenario::new("read-only", DbFault::ReadOnly, ClusterKind::MariaDb),
    HaScenario::new("spread", DbFault::Spread, ClusterKind::Galera),
    HaScenario::new("on-tenure", DbFault::OnTenure, ClusterKind::PatroniOnConsul),
    HaScenario::new(
        "on-tenure",
        DbFault::OnTenure,
        ClusterKind::PatroniOnConsulShort,
    ),
    HaScenario::new("on-tenure", DbFault::OnTenure, ClusterKind::PatroniOnEtcd),
];

impl ClusterKind {
    /// The DCS its Patroni keeps its leader key in.
    pub fn dcs(self) -> super::dcs::DcsKind {
        use super::dcs::DcsKind;
        match self {
            ClusterKind::PatroniOnConsul => DcsKind::TenureConsul {
                session_ttl_min: None,
            },
            ClusterKind::PatroniOnConsulShort => DcsKind::TenureConsul {
                session_ttl_min: Some(5),
            },
            ClusterKind::PatroniOnEtcd => DcsKind::TenureEtcd,
            _ => DcsKind::Etcd,
        }
    }
}

impl HaScenario {
    pub fn cluster_name(&self) -> &'static str {
        match self.cluster {
            ClusterKind::PatroniSync => "patroni sync",
            ClusterKind::PatroniAsync => "patroni async",
            ClusterKind::MariaDbAsync => "mariadb async",
            ClusterKind::Galera => "galera",
            ClusterKind::MariaDb => "mariadb",
            ClusterKind::PatroniOnConsul => "patroni on tenure (consul)",
            ClusterKind::PatroniOnConsulShort => "patroni on tenure (consul, ttl min 5s)",
            ClusterKind::PatroniOnEtcd => "patroni on tenure (etcd3)",
        }
    }

    /// The scenario's name with its cluster, as `--only` takes it: `kill-primary`,
    /// `lossy-failover-async`, `mariadb-async-failover`, `galera-kill-primary`, `read-only`
    /// (one MariaDB), `patroni-on-tenure-consul`, `patroni-on-tenure-etcd`; a negative control
    /// ends in `-no-epochs`.
    pub fn id(&self) -> String {
        let id = match self.cluster {
            ClusterKind::PatroniSync | ClusterKind::MariaDb => self.name.to_string(),
            ClusterKind::PatroniAsync => format!("{}-async", self.name),
            ClusterKind::MariaDbAsync => format!("mariadb-{}", self.name),
            ClusterKind::Galera => format!("galera-{}", self.name),
            ClusterKind::PatroniOnConsul => format!("patroni-{}-consul", self.name),
            ClusterKind::PatroniOnConsulShort => format!("patroni-{}-consul-short", self.name),
            ClusterKind::PatroniOnEtcd => format!("patroni-{}-etcd", self.name),
        };
        if self.epochs() {
            id
        } else {
            format!("{id}-no-epochs")
        }
    }

    /// The scenario's name as the table shows it: a control says that epochs are off.
    pub fn label(&self) -> String {
        if self.epochs() {
            self.name.to_string()
        } else {
            format!("{} (epochs off)", self.name)
        }
    }

    /// No pause and a healthy clock: one believer at a time is asserted (I2); no failover
    /// bound, since the database's own failover comes first.
    pub(super) fn expect(&self) -> Expect {
        Expect {
            exclusive: true,
            control_must_fail: false,
            fence_must_refuse: false,
            failover_bound: None,
        }
    }
}

/// The result of one scenario.
#[derive(Debug)]
pub struct HaOutcome {
    pub scenario: HaScenario,
    pub seed: u64,
    pub verdict: Verdict,
    pub issued: usize,
    /// Fault start → the first write through HAProxy that committed on another member.
    pub db_failover: Option<Duration>,
    /// Fault start → the first tenure gained after it.
    pub tenure_failover: Option<Duration>,
    pub notes: Vec<String>,
    pub ran: bool,
    pub dir: Option<PathBuf>,
    pub took: Duration,
}

impl HaOutcome {
    /// The term violations (I1) the checker found: for the negative control, what it must
    /// find (a term handed out twice, or lowered).
    pub fn caught(&self) -> usize {
        self.verdict
            .violations
            .iter()
            .filter(|v| v.invariant == "I1")
            .count()
    }

    pub fn passed(&self) -> bool {
        let errors = self.notes.iter().any(|n| n.starts_with("error"));
        let checked = if self.scenario.negative_control {
            self.caught() > 0
        } else if self.scenario.fault == DbFault::Spread {
            // The premise is broken on purpose; its notes say what must hold.
            true
        } else {
            self.verdict.violations.is_empty()
        };
        self.ran && !errors && checked
    }
}

impl HaScenario {
    /// What this scenario needs and this machine lacks: its cluster's tools, and for the etcd
    /// workload etcdctl and the tenure command.
    pub fn missing(&self) -> Vec<String> {
        let mut lacking = missing(self.cluster);
        if self.fault == DbFault::EtcdLock {
            lacking.extend(crate::etcd::missing());
        }
        lacking
    }
}

/// What the scenarios of `kind` need and this machine lacks.
pub fn missing(kind: ClusterKind) -> Vec<String> {
    match kind {
        ClusterKind::Galera | ClusterKind::MariaDb => galera::missing(),
        ClusterKind::MariaDbAsync => replication::missing(),
        ClusterKind::PatroniSync | ClusterKind::PatroniAsync => {
            patroni::missing(super::dcs::DcsKind::Etcd)
        }
        ClusterKind::PatroniOnConsul
        | ClusterKind::PatroniOnConsulShort
        | ClusterKind::PatroniOnEtcd => patroni::missing(kind.dcs()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::Violation;

    fn outcome(negative_control: bool, invariants: &[&'static str]) -> HaOutcome {
        let verdict = Verdict {
            violations: invariants
                .iter()
                .map(|i| Violation {
                    invariant: i,
                    detail: String::new(),
                })
                .collect(),
            ..Verdict::default()
        };
        HaOutcome {
            scenario: HaScenario {
                name: "lossy-failover",
                fault: DbFault::LossyFailover,
                cluster: ClusterKind::PatroniAsync,
                negative_control,
            },
            seed: 0,
            verdict,
            issued: 0,
            db_failover: None,
            tenure_failover: None,
            notes: Vec::new(),
            ran: true,
            dir: None,
            took: Duration::ZERO,
        }
    }

    #[test]
    fn the_control_passes_only_if_a_term_violation_was_caught() {
        assert!(outcome(true, &["I1"]).passed());
        assert!(outcome(true, &["I1", "I2"]).passed());
        assert!(!outcome(true, &[]).passed());
        assert!(
            !outcome(true, &["I4"]).passed(),
            "not the danger it exists to show"
        );
        let mut did_not_run = outcome(true, &["I1"]);
        did_not_run.ran = false;
        assert!(!did_not_run.passed());
    }

    #[test]
    fn a_scenario_on_its_premise_passes_only_without_violations() {
        assert!(outcome(false, &[]).passed());
        assert!(!outcome(false, &["I2"]).passed());
        let mut failed = outcome(false, &[]);
        failed
            .notes
            .push("error: the database did not fail over".into());
        assert!(!failed.passed());
    }

    #[test]
    fn every_scenario_has_its_own_id() {
        let mut ids: Vec<String> = ALL.iter().map(HaScenario::id).collect();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n);
        for id in [
            "lossy-failover-async",
            "lossy-failover-async-no-epochs",
            "mariadb-async-failover",
            "mariadb-async-failover-no-epochs",
        ] {
            assert!(ids.contains(&id.to_string()), "{id}");
        }
        let controls: Vec<String> = ALL
            .iter()
            .filter(|s| s.negative_control)
            .map(HaScenario::id)
            .collect();
        assert_eq!(
            controls,
            [
                "lossy-failover-async-no-epochs",
                "mariadb-async-failover-no-epochs"
            ],
            "every control runs without epochs, and only the controls do"
        );
        assert!(ids.contains(&"galera-kill-primary".to_string()));
        assert!(ids.contains(&"etcd-lock-failover-async".to_string()));
    }
}
