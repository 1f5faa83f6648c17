//! `tenure fence-sql`: the fence statement of each dialect, printed without connecting, and
//! given to the commands `tenure run` and `lock` run.

use crate::support::*;

#[test]
fn fence_sql_prints_the_dialects_statement_without_connecting() {
    let prefix = fresh_prefix();
    // Unroutable host: the dialect comes from the scheme, nothing connects.
    let cases = [
        (
            &["--database-url", "postgres://u:s3cretpw@192.0.2.1/x"][..],
            &["$1", "$3", "FOR SHARE", "clock_timestamp()"][..],
        ),
        (
            &["--database-url", "mariadb://u:s3cretpw@192.0.2.1/x"][..],
            &["name = ?", "@@global.read_only = 0", "LOCK IN SHARE MODE"][..],
        ),
        (&[][..], &["UPDATE", "RETURNING term"][..]),
    ];
    for (flags, markers) in cases {
        let out = run(tenure()
            .args(flags)
            .args(["--table-prefix", &prefix, "fence-sql"]));
        out.expect_code(0);
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines.len(), 2, "a comment and the statement:\n{out}");
        assert!(
            lines[0].starts_with("-- ") && lines[0].contains("name, holder, term"),
            "{out}"
        );
        assert!(lines[0].contains(&format!("table {prefix}lease")), "{out}");
        assert!(lines[1].contains(&format!(" {prefix}lease ")), "{out}");
        for marker in markers {
            assert!(lines[1].contains(marker), "{flags:?}: {marker}:\n{out}");
        }
        assert!(!out.stdout.contains("s3cretpw") && !out.stderr.contains("s3cretpw"));
    }
    assert!(
        !scratch_state_home().exists(),
        "fence-sql touched the default database's directory"
    );

    // --dialect wins over the URL; --json gives the parts.
    let out = run(tenure().args([
        "--database-url",
        "postgres://192.0.2.1/x",
        "--json",
        "fence-sql",
        "--dialect",
        "mysql",
    ]));
    out.expect_code(0);
    let json = out.json();
    assert_keys(&json, &["dialect", "parameters", "sql", "table"]);
    assert_eq!(json["dialect"], "mysql");
    assert_eq!(json["table"], "tenure_lease");
    assert_eq!(
        json["parameters"],
        serde_json::json!(["name", "holder", "term"])
    );
    assert!(
        json["sql"]
            .as_str()
            .unwrap()
            .ends_with("LOCK IN SHARE MODE"),
        "{out}"
    );

    // An unknown dialect is a usage error, never a statement.
    let out = run(tenure().args(["fence-sql", "--dialect", "oracle"]));
    out.expect_code(64);
    assert!(out.stdout.is_empty(), "{out}");
}

/// `tenure fence-sql --etcd`: the fence of etcd locks, of the dialect the URL names, with the
/// table prefix, as the library builds it; `--json` gives its parts.
#[test]
fn fence_sql_prints_the_etcd_locks_statement() {
    let prefix = fresh_prefix();
    for (url, kind, markers) in [
        (
            "postgres://192.0.2.1/x",
            BackendKind::Postgres,
            &["$2", "FOR SHARE"][..],
        ),
        (
            "mysql://192.0.2.1/x",
            BackendKind::MySql,
            &["kv_key = ?", "LOCK IN SHARE MODE"][..],
        ),
        (
            "sqlite:///nowhere/x.db",
            BackendKind::Sqlite,
            &["UPDATE", "RETURNING"][..],
        ),
    ] {
        let out = run(tenure().args([
            "--database-url",
            url,
            "--table-prefix",
            &prefix,
            "fence-sql",
            "--etcd",
        ]));
        out.expect_code(0);
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines.len(), 2, "a comment and the statement:\n{out}");
        assert!(lines[0].contains("$ETCD_LOCK_KEY, $ETCD_LOCK_REV"), "{out}");
        assert!(
            lines[0].contains(&format!("table {prefix}etcd_kv")),
            "{out}"
        );
        let expected = tenure::etcd::fence_sql(kind, &prefix).unwrap();
        assert_eq!(lines[1], format!("{expected};"));
        for marker in markers {
            assert!(lines[1].contains(marker), "{url}: {marker}:\n{out}");
        }
    }
    let out = run(tenure().args(["--json", "fence-sql", "--etcd", "--dialect", "postgres"]));
    out.expect_code(0);
    let json = out.json();
    assert_keys(&json, &["dialect", "parameters", "sql", "table"]);
    assert_eq!(json["table"], "tenure_etcd_kv");
    assert_eq!(json["parameters"], serde_json::json!(["key", "revision"]));
}

/// `tenure run`, `lock` and `every` give their command the store's fence statement.
#[tokio::test]
async fn commands_get_tenure_fence_sql() {
    let Some(db) = TestDb::new(BackendKind::Sqlite).await else {
        return;
    };
    let expected = tenure::backend::fence_sql(BackendKind::Sqlite, &db.prefix).unwrap();
    let print = ["--", "sh", "-c", "printf '%s\\n' \"$TENURE_FENCE_SQL\""];
    for (command, args) in [
        ("run", &["run", "fx", "--ttl", "2s"][..]),
        ("lock", &["lock", "fx", "--ttl", "2s"][..]),
    ] {
        let out = db.run(&[args, &print[..]].concat());
        out.expect_code(0);
        assert_eq!(out.stdout.trim_end(), expected, "{command}:\n{out}");
    }
}
