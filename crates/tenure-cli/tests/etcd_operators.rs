//! What an operator sees of etcd's API on tenure, on SQLite, PostgreSQL and MariaDB: an
//! `etcdctl lock` holder and a waiter through `tenure serve --etcd-listen` show, with their
//! leases, in `GET /v1/etcd` and in `tenure status` (JSON and text), bounded by `limit`; when
//! the holder goes the waiter is the owner; a database whose etcd was never used shows no etcd
//! section.

mod support;

use nix::sys::signal::Signal;
use serde_json::Value;
use std::time::Duration;
use support::etcd::{etcd_installed, etcdctl_command_at, tenure_target_with};
use support::serve::{eventually, Db};
use support::{BackendKind, Background};

per_backend!(a_lock_holder_and_its_waiter_show_in_status_and_on_the_api);

/// `(key, lease, owner)` of each recipe key of an overview.
fn keys(v: &Value) -> Vec<(String, String, bool)> {
    v["recipe_keys"]
        .as_array()
        .expect("recipe_keys")
        .iter()
        .map(|k| {
            (
                k["key"].as_str().expect("key").to_string(),
                k["lease"].as_str().expect("lease").to_string(),
                k["owner"].as_bool().expect("owner"),
            )
        })
        .collect()
}

/// The hex ids of an overview's leases, sorted.
fn leases(v: &Value) -> Vec<String> {
    let mut ids: Vec<String> = v["leases"]
        .as_array()
        .expect("leases")
        .iter()
        .map(|l| l["hex"].as_str().expect("hex").to_string())
        .collect();
    ids.sort();
    ids
}

fn a_lock_holder_and_its_waiter_show_in_status_and_on_the_api(kind: BackendKind) {
    if !etcd_installed() {
        return;
    }
    let runtime = support::runtime();
    let Some(db) = runtime.block_on(Db::new(kind)) else {
        return;
    };
    let quiet = db.run(&["status", "--json"]);
    quiet.expect_code(0);
    assert!(
        quiet.json().get("etcd").is_none(),
        "an unused etcd says nothing"
    );

    let target = tenure_target_with(&db, &["--poll-interval", "200ms"]);
    let server = target.server.as_ref().expect("a tenure server");
    let fresh = server.get("/v1/etcd");
    assert_eq!(fresh.status, 200, "{}", fresh.text());
    let fresh = fresh.json();
    assert_eq!(fresh["unused"], true, "{fresh}");
    assert_eq!(fresh["revision"], 1);

    let lock = || {
        Background::spawn(etcdctl_command_at(&target.url()).args([
            "lock",
            "--ttl",
            "30",
            "jobs/nightly",
        ]))
    };
    let holder = lock();
    let held = holder
        .next_line(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("the lock:\n{}", target.log()));
    let waiter = lock();
    let v = eventually(Duration::from_secs(15), "the waiter's key", || {
        let v = server.get("/v1/etcd").json();
        (keys(&v).len() == 2).then_some(v)
    });
    let (holder_lease, waiter_key) = {
        let k = keys(&v);
        let first = k
            .iter()
            .find(|(key, ..)| *key == held)
            .expect("the holder's key");
        let second = k
            .iter()
            .find(|(key, ..)| *key != held)
            .expect("the waiter's key");
        assert!(
            first.2 && !second.2,
            "the holder owns, the waiter waits: {v}"
        );
        assert_eq!(held, format!("jobs/nightly/{}", first.1));
        (first.1.clone(), second.0.clone())
    };
    let waiter_lease = waiter_key
        .strip_prefix("jobs/nightly/")
        .expect("the waiter's key is the lock's")
        .to_string();
    let mut both = vec![holder_lease.clone(), waiter_lease.clone()];
    both.sort();
    assert_eq!(leases(&v), both, "{v}");
    for l in v["leases"].as_array().expect("leases") {
        assert_eq!(l["granted_ttl"], 30);
        assert_eq!(l["keys"], 1);
        let left = l["remaining_ms"].as_u64().expect("remaining_ms");
        assert!(left > 0 && left <= 30_000, "{l}");
    }
    assert_eq!(v["unused"], false);
    assert_eq!(
        (v["more_leases"].clone(), v["more_recipe_keys"].clone()),
        (0.into(), 0.into())
    );
    let recipe = |key: &str| {
        v["recipe_keys"]
            .as_array()
            .expect("recipe_keys")
            .iter()
            .find(|k| k["key"] == key)
            .cloned()
            .expect("a recipe key")
    };
    let (owner, queued) = (recipe(&held), recipe(&waiter_key));
    assert_eq!(owner["prefix"], "jobs/nightly/");
    assert!(owner["create_revision"].as_i64() < queued["create_revision"].as_i64());
    assert_eq!(v["revision"], queued["create_revision"], "the last write");

    // The same in `tenure status`.
    let out = db.run(&["status", "--json"]);
    out.expect_code(0);
    let status = out.json();
    let etcd = &status["etcd"];
    assert_eq!(keys(etcd), keys(&v), "{status}");
    assert_eq!(leases(etcd), both);
    assert_eq!(etcd["revision"], v["revision"]);
    let out = db.run(&["status"]);
    out.expect_code(0);
    let text = &out.stdout;
    assert!(
        text.contains(&format!(
            "etcd: revision {}, never compacted",
            v["revision"]
        )),
        "{text}"
    );
    let line = |key: &str| {
        text.lines()
            .find(|l| l.contains(key))
            .unwrap_or_else(|| panic!("no line of {key}:\n{text}"))
            .to_string()
    };
    assert!(line(&held).trim_end().ends_with("yes"), "{text}");
    assert!(line(&waiter_key).trim_end().ends_with("waits"), "{text}");
    assert!(line(&holder_lease).contains("30s"), "{text}");

    // Bounded.
    let one = server.get("/v1/etcd?limit=1").json();
    assert_eq!(keys(&one).len(), 1);
    assert_eq!(leases(&one).len(), 1);
    assert_eq!(
        (one["more_leases"].clone(), one["more_recipe_keys"].clone()),
        (1.into(), 1.into())
    );
    assert_eq!(server.get("/v1/etcd?limit=0").status, 400);

    // The holder goes: the waiter owns the lock.
    holder.signal(Signal::SIGINT);
    let next = waiter
        .next_line(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("the waiter never got the lock:\n{}", target.log()));
    assert_eq!(next, waiter_key);
    let after = eventually(Duration::from_secs(15), "the holder's key gone", || {
        let v = server.get("/v1/etcd").json();
        (keys(&v).len() == 1).then_some(v)
    });
    assert_eq!(keys(&after), [(waiter_key, waiter_lease, true)]);
    waiter.signal(Signal::SIGINT);
    drop(target);
    runtime.block_on(db.drop_tables());
}
