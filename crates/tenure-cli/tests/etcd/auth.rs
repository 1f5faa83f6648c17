//! Authentication, side by side: tenure with `--token-file` and a real etcd with auth on and a
//! user `root` whose password is the same token. etcd's clients authenticate with it as the
//! password (any user name, on tenure) and present the token they get on every call.

use crate::side_by_side;
use crate::support::etcd::*;
use crate::support::serve::{http, TOKEN};

side_by_side!(token: authenticated_clients);

fn authenticated_clients(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    let user = format!("--user=root:{TOKEN}");
    t.record_run("get without a user", &etcdctl(target, &["get", "a"]));
    t.record_run(
        "a wrong password",
        &etcdctl(target, &["--user=root:wrong", "get", "a"]),
    );
    t.record_run("put", &etcdctl(target, &[&user, "put", "a", "1"]));
    t.record_run("get", &etcdctl(target, &[&user, "get", "a"]));
    t.record_run(
        "lock",
        &etcdctl(target, &[&user, "lock", "L", "echo", "held"]),
    );
    let members = etcdctl(target, &["member", "list", "-w", "json"]);
    t.record(
        "member list without a user",
        format!("exit {:?}", members.code),
    );
    // The JSON gateway, as Patroni authenticates: the token in `Authorization`.
    let denied = target.post("/v3/kv/range", r#"{"key":"YQ=="}"#);
    t.record(
        "gateway without a token",
        format!("{} {}", denied.status, denied.text()),
    );
    let authenticated = target.post(
        "/v3/auth/authenticate",
        &format!(r#"{{"name":"root","password":"{TOKEN}"}}"#),
    );
    let token = authenticated.json()["token"]
        .as_str()
        .unwrap_or_else(|| panic!("no token: {}", authenticated.text()))
        .to_string();
    t.alias(token.clone(), "TOKEN");
    let read = http(
        target.addr,
        "POST",
        "/v3/kv/range",
        &[
            ("Authorization", &token),
            ("Content-Type", "application/json"),
        ],
        br#"{"key":"YQ=="}"#,
    );
    t.record_json(
        &format!("gateway with its token {}", read.status),
        &read.json(),
    );
    let forged = http(
        target.addr,
        "POST",
        "/v3/kv/range",
        &[
            ("Authorization", "forged"),
            ("Content-Type", "application/json"),
        ],
        br#"{"key":"YQ=="}"#,
    );
    t.record(
        "gateway with a forged token",
        format!("{} {}", forged.status, forged.text()),
    );
    t
}
