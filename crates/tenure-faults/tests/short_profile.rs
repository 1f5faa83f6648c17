//! The short fault-injection profile: every scenario on every backend, checked by the checker,
//! with the negative control required to be caught in the pause scenarios. The backends run
//! side by side, each its scenarios one after another.
//!
//! SQLite always runs. PostgreSQL and MariaDB run against `TENURE_TEST_POSTGRES_URL` /
//! `TENURE_TEST_MYSQL_URL` (default: the local servers); when one is unreachable the test skips
//! it with a printed reason, except under `CI=true`, where that fails. The server-restart
//! scenario restarts the local servers, so it runs only under `CI=true` or with
//! `TENURE_FAULTS_RESTART=1` (and as root on the machine that runs them). The client-edge
//! scenarios (`scenario::CLIENT_EDGE`: one candidate id in several nodes, the lock workload)
//! run here on SQLite only, to keep the test short; `tenure-faults run` runs them everywhere.
//! The etcd scenarios (`scenario::ETCD`: `etcdctl lock` clients on `tenure serve`, which needs
//! the `tenure` binary and Debian's etcdctl) run only in `tenure-faults run` (CI names them).

use std::path::PathBuf;
use std::time::Duration;
use tenure::BackendKind;
use tenure_faults::profile::{self, Profile};
use tenure_faults::runner::{Settings, LIBFAKETIME};
use tenure_faults::target::Target;
use tenure_faults::{dbserver, report, scenario};

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn skip(what: &str, why: &str) {
    assert!(!ci(), "CI=true: {what} must run, but {why}");
    eprintln!("tenure-faults: skipping {what}: {why}");
}

async fn server(kind: BackendKind, var: &str, default: &str) -> Option<Target> {
    let url = std::env::var(var).unwrap_or_else(|_| default.to_string());
    if let Err(e) = dbserver::prepare(kind, &url).await {
        skip(&format!("{kind:?}"), &e);
        return None;
    }
    Some(Target {
        kind,
        url: dbserver::suite_url(&url).unwrap(),
        pooled: false,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_profile_finds_no_violation_and_catches_the_negative_control() {
    let mut targets = vec![Target {
        kind: BackendKind::Sqlite,
        url: String::new(),
        pooled: false,
    }];
    targets.extend(
        server(
            BackendKind::Postgres,
            "TENURE_TEST_POSTGRES_URL",
            "postgres://postgres@127.0.0.1:5432/test",
        )
        .await,
    );
    targets.extend(
        server(
            BackendKind::MySql,
            "TENURE_TEST_MYSQL_URL",
            "mysql://root@127.0.0.1:3306/test",
        )
        .await,
    );

    let mut only: Vec<String> = scenario::ALL
        .iter()
        .map(|s| s.name.to_string())
        .filter(|s| !scenario::CLIENT_EDGE.contains(&s.as_str()))
        .filter(|s| !scenario::ETCD.contains(&s.as_str()))
        .collect();
    let restart_allowed = ci() || std::env::var("TENURE_FAULTS_RESTART").is_ok_and(|v| v == "1");
    let cannot = targets
        .iter()
        .filter(|t| t.kind != BackendKind::Sqlite)
        .find_map(|t| dbserver::cannot_restart(t.kind, &t.url));
    if !restart_allowed {
        eprintln!("tenure-faults: skipping restart: it restarts the local servers (set CI=true or TENURE_FAULTS_RESTART=1)");
        only.retain(|s| s != "restart");
    } else if let Some(why) = cannot {
        skip("restart", &why);
        only.retain(|s| s != "restart");
    }
    if !std::path::Path::new(LIBFAKETIME).exists() {
        skip(
            "clock",
            &format!("{LIBFAKETIME} is missing (apt-get install faketime)"),
        );
        only.retain(|s| s != "clock");
    }

    let settings = Settings {
        exe: PathBuf::from(env!("CARGO_BIN_EXE_tenure-faults")),
        ttl: Duration::from_secs(2),
        nodes: 3,
        duration: Profile::Short.duration(),
    };
    let seed = std::env::var("TENURE_FAULTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("tenure-faults: short profile, seed {seed} (TENURE_FAULTS_SEED reruns it)");
    let progress = |o: &tenure_faults::runner::Outcome| {
        eprintln!(
            "  {:<13} {:?}: {} in {:.1} s",
            o.scenario,
            o.backend,
            if o.passed() { "pass" } else { "FAIL" },
            o.took.as_secs_f64()
        )
    };
    // The backends run side by side, each its scenarios one after another (SQLite's with the
    // client-edge ones after them): a scenario's faults act on its own nodes, proxies and
    // database only (a restart restarts its own server, `sessions` kills its own database's
    // sessions), and one backend after another took about 6 minutes where the longest alone
    // takes about 2.
    let mut edge: Vec<String> = only.clone();
    edge.extend(scenario::CLIENT_EDGE.iter().map(|s| s.to_string()));
    let of = |kind: BackendKind| -> Vec<Target> {
        targets.iter().filter(|t| t.kind == kind).cloned().collect()
    };
    let (sqlite, postgres, mysql) = (
        of(BackendKind::Sqlite),
        of(BackendKind::Postgres),
        of(BackendKind::MySql),
    );
    let (a, b, c) = tokio::join!(
        profile::run_all(&sqlite, &settings, seed, &edge, &progress),
        profile::run_all(&postgres, &settings, seed, &only, &progress),
        profile::run_all(&mysql, &settings, seed, &only, &progress),
    );
    let mut outcomes: Vec<_> = a.into_iter().chain(b).chain(c).collect();
    // The report in the profile's order: scenario by scenario, backend by backend.
    let scenario_at = |name: &str| scenario::ALL.iter().position(|s| s.name == name);
    let backend_at = |kind| targets.iter().position(|t| t.kind == kind);
    outcomes.sort_by_key(|o| (scenario_at(o.scenario), backend_at(o.backend)));
    let table = report::table(&outcomes);
    let details = report::details(&outcomes);
    eprintln!("{table}\n{details}");

    // Every applicable scenario ran on every backend.
    let expected: usize = scenario::ALL
        .iter()
        .filter(|s| only.iter().any(|o| o == s.name))
        .map(|s| targets.iter().filter(|t| s.applies_to(t)).count())
        .sum::<usize>()
        + scenario::CLIENT_EDGE.len();
    assert_eq!(outcomes.len(), expected);
    assert!(
        outcomes.iter().all(|o| o.passed()),
        "seed {seed}\n{table}\n{details}"
    );
    // The pause scenarios did catch the unfenced control (passed() requires it; checked here
    // too so that a change to passed() cannot silently drop it).
    for o in outcomes.iter().filter(|o| o.scenario == "pause") {
        assert!(!o.verdict.control.is_empty(), "{table}");
        assert!(o.verdict.fenced_rejected > 0, "{table}");
    }
}
