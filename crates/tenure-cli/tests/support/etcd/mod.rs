//! etcd's v3 API side by side (`tests/etcd_*.rs`): the same scenario runs against a real etcd
//! (Debian's etcd-server 3.4, started on free loopback ports with its data in a temporary
//! directory under /tmp, removed when it stops) and against `tenure serve --etcd-listen` on
//! one backend, and their transcripts must be equal. A difference is a failing test unless
//! the scenario leaves that detail out of its transcript on purpose, saying why (and
//! docs/guides/etcd.md lists it).
//!
//! - [`side_by_side!`](crate::side_by_side): for each scenario, `etcd::NAME` (the real etcd
//!   alone: the scenario's own assertions hold on the reference) and `sqlite::NAME`,
//!   `postgres::NAME`, `mysql::NAME` (both, transcripts compared).
//! - [`Target`]: where a scenario sends its requests; [`Transcript`]: what it saw, with
//!   what differs by nature (cluster and member ids, lease ids, the Raft term) normalized.
//! - [`RealEtcd`] (`real.rs`): the real etcd; [`etcdctl`] (`etcdctl.rs`): Debian's etcdctl 3.4
//!   (`ETCDCTL_API=3`) against a target; [`GatewayStream`] (`gateway.rs`): a streamed answer
//!   of the JSON gateway, as Patroni reads it; `client.rs`: the Rust `etcd-client` in a
//!   scenario.

mod client;
mod etcdctl;
mod gateway;
mod real;

// Every test binary has this module; each uses some of it.
#[allow(unused_imports)]
pub(crate) use client::*;
#[allow(unused_imports)]
pub(crate) use etcdctl::*;
#[allow(unused_imports)]
pub(crate) use gateway::*;
#[allow(unused_imports)]
pub(crate) use real::*;

use super::serve::{http, Db, Reply, Server};
use super::BackendKind;
use serde_json::Value;
use std::net::SocketAddr;

/// One side of a comparison: where a scenario sends its requests.
pub(crate) struct Target {
    /// The client address (gRPC and the JSON gateway).
    pub addr: SocketAddr,
    /// `etcd` or `tenure (sqlite)` …, for messages.
    pub label: String,
    /// The tenure server behind it, if it is one (for its log in failure messages).
    pub server: Option<Server>,
}

impl Target {
    /// `http://ADDR`, as etcd's clients take an endpoint.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A POST of `json` to the JSON gateway's `path`.
    pub(crate) fn post(&self, path: &str, json: &str) -> Reply {
        http(
            self.addr,
            "POST",
            path,
            &[("Content-Type", "application/json")],
            json.as_bytes(),
        )
    }

    /// What the tenure server printed, or nothing for the real etcd.
    pub(crate) fn log(&self) -> String {
        self.server.as_ref().map(Server::stderr).unwrap_or_default()
    }
}

// === the comparison ===

/// A scenario: requests against a target, and what it saw.
pub(crate) type Scenario = fn(&Target) -> Transcript;

/// One test per scenario on the real etcd alone (`etcd::NAME`) and one per backend comparing
/// tenure with it (`sqlite::NAME`, `postgres::NAME`, `mysql::NAME`).
///
/// `side_by_side!(token: NAME, …)`: the same with authentication on both sides — tenure with
/// `--token-file` (the test token, [`TOKEN`](super::serve::TOKEN)), the real etcd with a user
/// `root` whose password is that token, and auth enabled.
#[macro_export]
macro_rules! side_by_side {
    (token: $($scenario:ident),* $(,)?) => {
        mod etcd {
            $( #[test] fn $scenario() { $crate::support::etcd::reference_with(true, super::$scenario) } )*
        }
        $crate::side_by_side!(@backend token, sqlite, Sqlite, $($scenario),*);
        $crate::side_by_side!(@backend token, postgres, Postgres, $($scenario),*);
        $crate::side_by_side!(@backend token, mysql, MySql, $($scenario),*);
    };
    (@backend token, $module:ident, $kind:ident, $($scenario:ident),*) => {
        mod $module {
            $(
                #[test]
                fn $scenario() {
                    $crate::support::etcd::compare_with(true, tenure::BackendKind::$kind, super::$scenario)
                }
            )*
        }
    };
    ($($scenario:ident),* $(,)?) => {
        mod etcd {
            $( #[test] fn $scenario() { $crate::support::etcd::reference(super::$scenario) } )*
        }
        $crate::side_by_side!(@backend sqlite, Sqlite, $($scenario),*);
        $crate::side_by_side!(@backend postgres, Postgres, $($scenario),*);
        $crate::side_by_side!(@backend mysql, MySql, $($scenario),*);
    };
    (@backend $module:ident, $kind:ident, $($scenario:ident),*) => {
        mod $module {
            $(
                #[test]
                fn $scenario() {
                    $crate::support::etcd::compare(tenure::BackendKind::$kind, super::$scenario)
                }
            )*
        }
    };
}

/// Runs `scenario` on a real etcd (its own assertions must hold there).
pub(crate) fn reference(scenario: Scenario) {
    reference_with(false, scenario);
}

/// The same, with authentication on (`token`; see the macro).
pub(crate) fn reference_with(token: bool, scenario: Scenario) {
    if !etcd_installed() {
        return;
    }
    let etcd = RealEtcd::start();
    let target = Target {
        addr: etcd.addr,
        label: "etcd".into(),
        server: None,
    };
    if token {
        etcd.enable_auth();
    }
    let transcript = scenario(&target);
    if std::env::var_os("TENURE_TEST_SHOW_TRANSCRIPT").is_some() {
        eprintln!("{}", transcript.lines.join("\n"));
    }
    assert!(
        !transcript.lines.is_empty(),
        "a scenario records what it saw"
    );
}

/// Runs `scenario` on a real etcd and on `tenure serve --etcd-listen` on `kind`; their
/// transcripts must be equal.
pub(crate) fn compare(kind: BackendKind, scenario: Scenario) {
    compare_with(false, kind, scenario);
}

/// The same, with authentication on both sides (`token`; see the macro).
pub(crate) fn compare_with(token: bool, kind: BackendKind, scenario: Scenario) {
    if !etcd_installed() {
        return;
    }
    let runtime = super::runtime();
    let Some(db) = runtime.block_on(Db::new(kind)) else {
        return;
    };
    let expected = {
        let etcd = RealEtcd::start();
        if token {
            etcd.enable_auth();
        }
        scenario(&Target {
            addr: etcd.addr,
            label: "etcd".into(),
            server: None,
        })
    };
    let target = if token {
        tokened_target(&db)
    } else {
        tenure_target(&db)
    };
    let seen = scenario(&target);
    if seen.lines != expected.lines {
        panic!(
            "tenure on {kind} answered differently from etcd\n{}\n--- tenure serve's log\n{}",
            diff(&expected.lines, &seen.lines),
            target.log()
        );
    }
    drop(target);
    runtime.block_on(db.drop_tables());
}

/// `tenure serve --etcd-listen 127.0.0.1:0` on `db`, as a target.
pub(crate) fn tenure_target(db: &Db) -> Target {
    tenure_target_with(db, &[])
}

/// `tenure serve --etcd-listen 127.0.0.1:0 --token-file …` (the test token) on `db`.
pub(crate) fn tokened_target(db: &Db) -> Target {
    let server = db.serve(&["--etcd-listen", "127.0.0.1:0"]);
    let addr = server
        .etcd
        .unwrap_or_else(|| panic!("no etcd listener:\n{}", server.stderr()));
    Target {
        addr,
        label: format!("tenure ({}, with a token)", db.kind),
        server: Some(server),
    }
}

/// The same with more flags (without `--token-file`: a fresh etcd has no auth either).
pub(crate) fn tenure_target_with(db: &Db, flags: &[&str]) -> Target {
    let mut args = vec!["--etcd-listen", "127.0.0.1:0"];
    args.extend_from_slice(flags);
    let server = db.serve_without_token(&args);
    let addr = server
        .etcd
        .unwrap_or_else(|| panic!("no etcd listener:\n{}", server.stderr()));
    Target {
        addr,
        label: format!("tenure ({})", db.kind),
        server: Some(server),
    }
}

/// The two transcripts line by line, differences marked.
fn diff(expected: &[String], seen: &[String]) -> String {
    let mut out = String::from("    etcd | tenure\n");
    for i in 0..expected.len().max(seen.len()) {
        let (e, s) = (expected.get(i), seen.get(i));
        let mark = if e == s { "  " } else { "≠ " };
        out.push_str(&format!(
            "{mark}{:>3}: {}\n       {}\n",
            i,
            e.map_or("<none>", String::as_str),
            s.map_or("<none>", String::as_str)
        ));
    }
    out
}

// === transcripts ===

/// What a scenario saw, line by line, with what differs between any two etcds by nature
/// replaced by stable names: ids registered with [`Transcript::alias`], and in JSON the
/// headers' `cluster_id`, `member_id` and `raft_term`.
#[derive(Debug, Default)]
pub(crate) struct Transcript {
    pub lines: Vec<String>,
    aliases: Vec<(String, String)>,
}

impl Transcript {
    pub(crate) fn new() -> Transcript {
        Transcript::default()
    }

    /// From now on, `raw` (a lease id …) reads `name` in what is recorded.
    pub(crate) fn alias(&mut self, raw: impl Into<String>, name: impl Into<String>) {
        let raw = raw.into();
        if !raw.is_empty() {
            self.aliases.push((raw, name.into()));
        }
    }

    /// Records `what` happened and saw `text` (aliases applied).
    pub(crate) fn record(&mut self, what: &str, text: impl AsRef<str>) {
        let mut text = text.as_ref().trim_end().to_string();
        for (raw, name) in &self.aliases {
            text = text.replace(raw.as_str(), name);
        }
        self.lines.push(format!("{what}: {text}"));
    }

    /// Records a JSON answer with the ids of the cluster, the member and the Raft term left
    /// out (aliases applied to its text).
    pub(crate) fn record_json(&mut self, what: &str, json: &Value) {
        let mut json = json.clone();
        strip_ids(&mut json);
        self.record(what, json.to_string());
    }

    /// Records what etcdctl printed and how it ended.
    pub(crate) fn record_run(&mut self, what: &str, output: &Ctl) {
        self.record(what, output.summary());
    }
}

/// Leaves out what differs between two etcds by nature, wherever it sits.
pub(crate) fn strip_ids(json: &mut Value) {
    match json {
        Value::Object(map) => {
            for key in ["cluster_id", "member_id", "raft_term"] {
                map.remove(key);
            }
            for value in map.values_mut() {
                strip_ids(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_ids),
        _ => {}
    }
}
