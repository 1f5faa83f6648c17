//! Bad input: every bad name, id, prefix, duration and database URL gets a one-line message
//! naming the value and what is allowed, a usage (64) or unavailable (69) exit code, and
//! changes nothing; a password is never shown.

use crate::support::*;
use std::time::Duration;

crate::per_backend!(
    async bad_input_is_refused_before_anything_is_written,
);

/// `args`, the exit code, and what the one-line message must contain: the bad value as shown
/// and what is allowed.
type Case = (Vec<String>, i32, Vec<String>);

fn case(args: &[&str], code: i32, says: &[&str]) -> Case {
    (
        args.iter().map(|s| s.to_string()).collect(),
        code,
        says.iter().map(|s| s.to_string()).collect(),
    )
}

/// Runs `args`, checking the exit code and a one-line message naming the value.
fn refused(db_command: &mut std::process::Command, (args, code, says): &Case) -> Output {
    let out = run(db_command.args(args));
    out.expect_code(*code);
    assert!(out.stdout.is_empty(), "{args:?} printed on stdout:\n{out}");
    let lines = out.message_lines();
    assert_eq!(lines.len(), 1, "{args:?}: not a one-line message:\n{out}");
    for s in says {
        assert!(
            lines[0].contains(s.as_str()),
            "{args:?}: {s:?} not said:\n{out}"
        );
    }
    out
}

async fn bad_input_is_refused_before_anything_is_written(kind: BackendKind) {
    let Some(db) = TestDb::new(kind).await else {
        return;
    };
    let long_name = "n".repeat(192);
    let long_id = "i".repeat(192);
    let bytes = "1 to 191 bytes";
    let control = "must not contain control characters";
    let cases = [
        case(&["pause", ""], 64, &["invalid name \"\"", bytes]),
        case(
            &["pause", &long_name],
            64,
            &[&format!("{long_name:?}"), bytes],
        ),
        case(&["pause", "bad\nname"], 64, &["\"bad\\nname\"", control]),
        case(&["demote", "bell\u{7}"], 64, &["\"bell\\u{7}\"", control]),
        case(&["handover", "x\ty", "b"], 64, &["\"x\\ty\"", control]),
        case(&["resume", "del\u{7f}"], 64, &["\"del\\u{7f}\"", control]),
        case(&["leader", "", "--json"], 64, &["invalid name \"\""]),
        case(&["watch", "a\rb"], 64, &["\"a\\rb\"", control]),
        case(
            &["history", &long_name],
            64,
            &[&format!("{long_name:?}"), bytes],
        ),
        case(
            &["leader", "x", "--am-i", "a\nb"],
            64,
            &["invalid candidate id \"a\\nb\"", control],
        ),
        case(
            &["handover", "x", "a\tb"],
            64,
            &["invalid candidate id \"a\\tb\"", control],
        ),
        case(
            &["handover", "x", &long_id, "--now"],
            64,
            &[&format!("{long_id:?}"), bytes],
        ),
        case(
            &["--table-prefix", "x;drop", "pause", "x"],
            64,
            &["\"x;drop\"", "^[A-Za-z_][A-Za-z0-9_]{0,40}$"],
        ),
        case(
            &["--table-prefix", "1tenure_", "migrate"],
            64,
            &["\"1tenure_\"", "^[A-Za-z_]"],
        ),
        case(
            &["--table-prefix", &"p".repeat(42), "status"],
            64,
            &[&"p".repeat(42), "{0,40}"],
        ),
        case(
            &["watch", "x", "--interval", "10parsecs"],
            64,
            &["'10parsecs'", "500ms, 10s or 2m"],
        ),
        case(&["history", "x", "--limit", "0"], 64, &["'0'", "1..=10000"]),
        // Every duration flag is bounded before it can reach the database (issue 25: a
        // minimum hold time wrapped into the past and freed the name at once).
        case(
            &["lock", "x", "--at-least", "3000000000000h", "--", "true"],
            64,
            &["'3000000000000h'", "--at-least", "at most 100 years"],
        ),
        case(
            &["lock", "x", "--at-least", "999999999999h", "--", "true"],
            64,
            &["'999999999999h'", "at most 100 years"],
        ),
        case(
            &["run", "x", "--ttl", "3000000000000h", "--", "true"],
            64,
            &["'3000000000000h'", "--ttl", "at most 100 years"],
        ),
        case(
            &["run", "x", "--grace", "101y", "--", "true"],
            64,
            &["'101y'", "--grace", "at most 100 years"],
        ),
        // Priorities are i32 (issue 28); --observe needs names to observe.
        case(
            &["run", "x", "--priority", "2147483648", "--", "true"],
            64,
            &["'2147483648'", "--priority"],
        ),
        case(
            &["every", "1s", "x", "--priority", "high", "--", "true"],
            64,
            &["'high'", "--priority"],
        ),
        case(
            &["run", "x", "--settle", "101y", "--", "true"],
            64,
            &["'101y'", "--settle", "at most 100 years"],
        ),
        case(&["serve", "--observe"], 64, &["--campaign"]),
        case(
            &["spread", "g", "--shards", "0", "--", "true"],
            64,
            &["'0'", "--shards"],
        ),
        // Bounded before anything is allocated (issue 35.4: 4294967295 shards aborted).
        case(
            &["spread", "g", "--shards", "4294967295", "--", "true"],
            64,
            &["'4294967295'", "--shards", "1..=1000000"],
        ),
        case(
            &["spread", "g", "--shards", "1000001", "--", "true"],
            64,
            &["'1000001'", "--shards", "1..=1000000"],
        ),
        case(
            &[
                "spread",
                "g",
                "--shards",
                "4",
                "--max-per-member",
                "4294967295",
                "--",
                "true",
            ],
            64,
            &["'4294967295'", "--max-per-member", "1..=1000000"],
        ),
        case(
            &[
                "spread", "g", "--shards", "4", "--weight", "0", "--", "true",
            ],
            64,
            &["'0'", "--weight"],
        ),
        case(
            &[
                "spread",
                "g",
                "--shards",
                "4",
                "--max-per-member",
                "0",
                "--",
                "true",
            ],
            64,
            &["'0'", "--max-per-member"],
        ),
        case(
            &["spread", &"g".repeat(189), "--shards", "100", "--", "true"],
            64,
            &["/99\"", "1 to 191 bytes"],
        ),
        case(
            &["spread", "g\u{7}", "--shards", "4", "--", "true"],
            64,
            &["control"],
        ),
        case(&["candidates", "a\u{7f}b"], 64, &["control"]),
        case(
            &["watch", "x", "--interval", "3000000000000h"],
            64,
            &["'3000000000000h'", "at most 100 years"],
        ),
    ];
    for c in &cases {
        refused(&mut db.tenure(), c);
    }
    // Usage errors that clap explains at more length (with the usage line): still 64.
    for args in [
        &["history", "x", "--limit", "-5"][..],
        &["leader"],
        &["handover", "x"],
        &["frobnicate", "x"],
        &["--json"],
    ] {
        let out = db.run(args);
        out.expect_code(64);
        assert!(out.stdout.is_empty(), "{out}");
        assert!(out.stderr.starts_with("error: "), "{out}");
    }
    // Nothing connected: no SQLite file, no tables of this prefix.
    if kind == BackendKind::Sqlite {
        assert!(!db.file_exists(), "the SQLite file was created");
    }
    db.assert_untouched("bad input").await;
    for table in ["lease", "history", "schema"] {
        assert_eq!(db.rows(table).await, None, "{table} was created");
    }
}

#[tokio::test]
async fn bad_database_urls_are_refused() {
    let prefix = fresh_prefix();
    let pause = |url: &str| -> Vec<String> {
        [
            "--database-url",
            url,
            "--table-prefix",
            &prefix,
            "pause",
            "x",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let cases = [
        (
            pause("postgres://127.0.0.1:notaport/test"),
            64,
            vec!["postgres://127.0.0.1:notaport/test", "invalid port"],
        ),
        (
            pause("redis://127.0.0.1:6379/0"),
            64,
            vec![
                "redis://127.0.0.1:6379/0",
                "postgres://, mysql://, mariadb:// or sqlite://",
            ],
        ),
        (
            pause("postgres//127.0.0.1/test"),
            64,
            vec!["postgres//127.0.0.1/test", "the scheme must be"],
        ),
        (
            pause("sqlite://"),
            64,
            vec!["invalid database URL sqlite://", "path"],
        ),
        (
            pause("sqlite:?mode=rwc"),
            64,
            vec!["invalid database URL sqlite:?mode=rwc", "path"],
        ),
        // Malformed with a password: the message must not show it, so it names the scheme.
        (
            pause("postgres://app:s3cretpw@[bad/test"),
            64,
            vec!["invalid database URL postgres:"],
        ),
        (
            pause(""),
            64,
            vec!["invalid database URL \"\"", "empty", "postgres://"],
        ),
        (
            pause("postgres://postgres@127.0.0.1:1/test"),
            69,
            vec!["cannot connect to postgres://postgres@127.0.0.1:1/test"],
        ),
        // Unreachable is 69 for `leader --am-i` too, not the 1 of "not the leader".
        (
            [
                "--database-url",
                "postgres://postgres@127.0.0.1:1/test",
                "leader",
                "x",
                "--am-i",
                "a",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            69,
            vec!["cannot connect to postgres://postgres@127.0.0.1:1/test"],
        ),
        (
            pause("mysql://root@127.0.0.1:1/test"),
            69,
            vec!["cannot connect to mysql://root@127.0.0.1:1/test"],
        ),
    ];
    // At once: the unreachable servers take the connect timeout (5 s) each.
    std::thread::scope(|scope| {
        for (args, code, says) in &cases {
            scope.spawn(move || {
                let says = says.iter().map(|s| s.to_string()).collect();
                let out = refused(&mut tenure(), &(args.clone(), *code, says));
                assert!(!out.stderr.contains("s3cretpw"), "password shown:\n{out}");
                assert!(out.took < Duration::from_secs(15), "took {:?}", out.took);
            });
        }
    });

    // An empty URL from the environment.
    refused(
        tenure().env("TENURE_DATABASE_URL", ""),
        &case(&["pause", "x"], 64, &["\"\"", "TENURE_DATABASE_URL"]),
    );

    // Wrong credentials on the MariaDB server: 69, and the password is never shown, not even
    // in trace logs.
    let Some(db) = TestDb::new(BackendKind::MySql).await else {
        return;
    };
    let password = format!("wrongpass{}", token());
    let url = with_password(&db.url, &password);
    for extra in [&[][..], &["-vv", "--log-format", "json"][..]] {
        let mut args = vec!["--database-url", url.as_str()];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["pause", "x"]);
        let out = run(db.tenure().args(&args));
        out.expect_code(69);
        assert!(
            !out.stderr.contains(&password) && !out.stdout.contains(&password),
            "password shown:\n{out}"
        );
        assert!(out.stderr.contains(":***@"), "{out}");
        if extra.is_empty() {
            let lines = out.message_lines();
            assert_eq!(lines.len(), 1, "{out}");
            assert!(lines[0].contains("cannot connect to mysql://"), "{out}");
        }
    }
    db.assert_untouched("wrong password").await;
    assert_eq!(db.rows("schema").await, None);
}

/// `url` with its user's password replaced by `password`.
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("scheme");
    let (userinfo, host) = rest.split_once('@').unwrap_or(("root", rest));
    let user = userinfo.split(':').next().unwrap_or("root");
    format!("{scheme}://{user}:{password}@{host}")
}
