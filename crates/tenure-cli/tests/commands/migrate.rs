//! `tenure migrate`: the printed DDL of each dialect without a connection, and a database
//! without DDL rights (`--no-create`) before and after the tables exist.

use crate::admin::admin_json;
use crate::support::*;
use serde_json::json;
use std::time::Duration;

crate::per_backend!(
    async migrate_then_no_create,
);

#[test]
fn migrate_print_needs_no_connection() {
    // Unroutable hosts (TEST-NET-1): any attempt to connect would hang for seconds.
    let cases = [
        (
            "postgres://tenure:s3cretpw@192.0.2.1:5432/x",
            &["TIMESTAMPTZ", "GENERATED ALWAYS AS IDENTITY"][..],
        ),
        (
            "postgresql://tenure:s3cretpw@192.0.2.1/x",
            &["TIMESTAMPTZ"][..],
        ),
        (
            "mysql://tenure:s3cretpw@192.0.2.1:3306/x",
            &[
                "DATETIME(6)",
                "ENGINE=InnoDB",
                "utf8mb4_bin",
                "DELIMITER //\nCREATE PROCEDURE IF NOT EXISTS ",
                "lock_acquire_v3(IN p_name",
                "lock_release_v1(IN p_name",
            ][..],
        ),
        (
            "mariadb://tenure:s3cretpw@192.0.2.1/x",
            &["DATETIME(6)"][..],
        ),
        (
            "sqlite:///nonexistent-tenure-dir/x.db",
            &["AUTOINCREMENT"][..],
        ),
    ];
    let prefix = fresh_prefix();
    for (url, markers) in cases {
        let out = run(tenure().args([
            "--database-url",
            url,
            "--table-prefix",
            &prefix,
            "migrate",
            "--print",
        ]));
        out.expect_code(0);
        assert!(
            out.took < Duration::from_secs(3),
            "{url} took {:?}",
            out.took
        );
        for table in [
            "lease",
            "history",
            "tick",
            "schema",
            "etcd_kv",
            "etcd_event",
        ] {
            assert!(
                out.stdout
                    .contains(&format!("CREATE TABLE IF NOT EXISTS {prefix}{table} (")),
                "{url}: {table}:\n{out}"
            );
        }
        for marker in markers {
            assert!(out.stdout.contains(marker), "{url}: {marker}:\n{out}");
        }
        assert!(
            !out.stdout.contains("tenure_"),
            "{url}: default prefix:\n{out}"
        );
        assert!(!out.stderr.contains("s3cretpw") && !out.stdout.contains("s3cretpw"));
    }
    assert!(!std::path::Path::new("/nonexistent-tenure-dir").exists());

    // The URL may come from the environment; the default prefix is tenure_.
    let out = run(tenure()
        .env("TENURE_DATABASE_URL", "mysql://192.0.2.1/x")
        .args(["migrate", "--print"]));
    out.expect_code(0);
    assert!(out
        .stdout
        .contains("CREATE TABLE IF NOT EXISTS tenure_lease ("));
    assert!(out.stdout.contains("ENGINE=InnoDB"), "{out}");

    // A bad prefix is refused even here.
    let out = run(tenure().args([
        "--database-url",
        "postgres://192.0.2.1/x",
        "--table-prefix",
        "x;drop",
        "migrate",
        "--print",
    ]));
    out.expect_code(64);
    assert!(out.stdout.is_empty(), "{out}");
    assert!(out.message_lines()[0].contains("\"x;drop\""), "{out}");
}

async fn migrate_then_no_create(kind: BackendKind) {
    let Some(db) = TestDb::new(kind).await else {
        return;
    };
    let name = unique("mig");

    // Without tables and without DDL rights: a usage error that says what to do.
    for args in [
        vec!["--no-create", "leader", name.as_str()],
        vec!["--no-create", "pause", name.as_str()],
        vec!["--no-create", "status", "--json"],
    ] {
        let out = db.run(&args);
        out.expect_code(64);
        assert!(out.stdout.is_empty(), "{out}");
        let lines = out.message_lines();
        assert_eq!(lines.len(), 1, "{out}");
        assert!(
            lines[0].contains("`tenure migrate`") && lines[0].contains(&format!("({}", db.prefix)),
            "{out}"
        );
    }
    db.assert_untouched("--no-create without tables").await;
    assert_eq!(db.rows("schema").await, None);

    let out = db.run(&["migrate"]);
    out.expect_code(0);
    let p = &db.prefix;
    assert!(
        out.stderr.contains(&format!(
            "tables {p}lease, {p}history, {p}tick and {p}schema are ready"
        )),
        "{out}"
    );
    assert_eq!(db.rows("lease").await, Some(0));
    assert_eq!(db.rows("schema").await, Some(1));
    db.run(&["migrate"]).expect_code(0);
    assert_eq!(db.rows("schema").await, Some(1), "migrate is idempotent");

    let lease = admin_json(
        &db,
        &["--no-create", "pause", &name],
        "pause",
        true,
        "paused",
    );
    assert_eq!(lease["name"], json!(name));
    let out = db.run(&["--no-create", "status", "--json"]);
    out.expect_code(0);
    assert_eq!(out.json()["leases"][0]["name"], json!(name));
    db.run(&["--no-create", "leader", &name]).expect_code(0);
    assert_eq!(db.rows("lease").await, Some(1));

    // A DBA applies the printed DDL (twice: it is idempotent); then --no-create works.
    let Some(dba) = TestDb::new(kind).await else {
        return;
    };
    let out = run(dba.tenure().args(["migrate", "--print"]));
    out.expect_code(0);
    dba.execute_script(&out.stdout).await;
    dba.execute_script(&out.stdout).await;
    assert_eq!(dba.rows("schema").await, Some(1));
    admin_json(
        &dba,
        &["--no-create", "pause", &name],
        "pause",
        true,
        "paused",
    );
    let out = dba.run(&["--no-create", "history", &name, "--json"]);
    out.expect_code(0);
    assert_eq!(out.json()["events"][0]["event"], json!("paused"));
    db.drop_tables().await;
    dba.drop_tables().await;
}
