//! `/openapi.json` checked against the running server by schemathesis (property-based: it
//! generates valid and invalid requests from the description and checks every answer's
//! status, content type, headers and body against it, that invalid input is refused, that
//! admin calls refuse a missing token, and that undocumented methods get 405).
//!
//! schemathesis comes from PyPI (`.ci/run` installs it). Without it this test prints
//! `SKIPPED: …`, unless `TENURE_TEST_REQUIRE_SCHEMATHESIS=1` (set by `.ci/run`), where that is
//! a failure.

mod support;

use std::process::Command;
use std::time::Instant;
use support::runtime;
use support::serve::*;

/// Test cases per operation and phase: enough to find a mismatch, within a few seconds.
const EXAMPLES: &str = "25";

fn schemathesis() -> Option<Command> {
    let found = Command::new("schemathesis")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(Command::new("schemathesis"));
    }
    if std::env::var("TENURE_TEST_REQUIRE_SCHEMATHESIS").as_deref() == Ok("1") {
        panic!("schemathesis is not installed, and TENURE_TEST_REQUIRE_SCHEMATHESIS=1");
    }
    eprintln!("SKIPPED: schemathesis is not installed (pip install schemathesis); set TENURE_TEST_REQUIRE_SCHEMATHESIS=1 to make this fail");
    None
}

#[test]
fn openapi_matches_the_running_server() {
    let Some(mut st) = schemathesis() else {
        return;
    };
    let rt = runtime();
    let db = rt.block_on(Db::new(BackendKind::Sqlite)).expect("sqlite");
    rt.block_on(db.campaign("beta", "node-9", 600_000));
    // Blocking queries are cut to 1 s so that generated waits stay short.
    let server = db.serve(&["--campaign", "alpha", "--max-wait", "1s"]);
    // The leader-check answers 503 by design (not leading): not a server error there.
    let config = db.dir().join("schemathesis.toml");
    std::fs::write(
        &config,
        "[[operations]]\n\
         include-operation-id = \"leaderCheck\"\n\
         checks.not_a_server_error.expected-statuses = [\"2XX\", \"4XX\", \"503\"]\n\
         \n\
         # Consul's rules that JSON Schema cannot state: a TTL between 10s and 24h, a session\n\
         # that exists for acquire/release (else 500, Consul's answer), acquire and release\n\
         # not together, cas not with recurse. Schema-valid input may get 400 or 500 there.\n\
         [[operations]]\n\
         include-operation-id = [\"consulSessionCreate\", \"consulKvPut\", \"consulKvDelete\"]\n\
         checks.not_a_server_error.expected-statuses = [\"2XX\", \"4XX\", \"500\"]\n\
         checks.positive_data_acceptance.expected-statuses = [\"2XX\", \"400\", \"404\", \"500\"]\n\
         \n\
         # A handover's target must be a live candidate of the name (or `unregistered`): a\n\
         # rule of the registry, not of the schema. Schema-valid input may get 400 there.\n\
         [[operations]]\n\
         include-operation-id = \"handover\"\n\
         checks.positive_data_acceptance.expected-statuses = [\"2XX\", \"400\", \"404\"]\n\
         \n\
         # A value over 512 KiB is refused with Consul's 413.\n\
         [[operations]]\n\
         include-operation-id = \"consulKvPut\"\n\
         checks.negative_data_rejection.expected-statuses = [\"400\", \"403\", \"404\", \"405\", \"413\"]\n",
    )
    .expect("config");
    let started = Instant::now();
    let output = st
        .current_dir(db.dir())
        .arg("--config-file")
        .arg(&config)
        .args(["--no-color", "run"])
        .arg(server.url("/openapi.json"))
        .args(["--checks", "all", "--max-examples", EXAMPLES])
        .args(["--generation-database", "none", "--request-timeout", "10"])
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--header", &format!("X-Consul-Token: {TOKEN}")])
        .output()
        .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("schemathesis took {:?}", started.elapsed());
    assert!(
        output.status.success(),
        "schemathesis found mismatches:\n{stdout}\n{stderr}\n--- server\n{}",
        server.stderr()
    );
    assert!(stdout.contains("passed"), "{stdout}");
    // The server took every generated request in its stride.
    assert_eq!(server.get("/health").status, 200);
}
