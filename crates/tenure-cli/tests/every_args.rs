//! `tenure every SCHEDULE NAME -- CMD`: the interval and the cron forms as the command line
//! reads them (the schedule itself is tested in schedules.rs).

mod support;

use nix::sys::signal::Signal;
use std::time::{Duration, Instant};
use support::{runtime, BackendKind, Background, TestDb};

fn sqlite() -> TestDb {
    runtime()
        .block_on(TestDb::new(BackendKind::Sqlite))
        .expect("SQLite is always there")
}

/// Bad input: a one-line error naming the value, exit 64, and no database file.
#[test]
fn bad_schedules_are_usage_errors() {
    let db = sqlite();
    for (args, expected) in [
        (
            vec!["every", "5parsecs", "job"],
            "invalid interval \"5parsecs\"",
        ),
        (vec!["every", "0s", "job"], "must be at least 1ms"),
        (
            vec!["every", "--cron", "every minute", "job"],
            "cron expression",
        ),
        // The interval read as cron: the flag says how SCHEDULE is read.
        (vec!["every", "--cron", "5s", "job"], "\"5s\""),
    ] {
        let out = db.run(&[&args[..], &["--", "true"]].concat());
        out.expect_code(64);
        let lines = out.message_lines();
        assert_eq!(lines.len(), 1, "{args:?}: {out}");
        assert!(lines[0].contains(expected), "{args:?}: {out}");
        assert!(!db.file_exists(), "{args:?} created the database");
    }
}

/// Missing or extra positionals are clap's usage errors, naming the usage.
#[test]
fn schedule_and_name_are_both_required() {
    let db = sqlite();
    for args in [
        vec!["every", "job", "--", "true"],
        vec!["every", "--cron", "* * * * * *", "--", "true"],
        vec!["every", "1s", "job", "extra", "--", "true"],
        vec!["every", "1s", "job"],
    ] {
        let out = db.run(&args);
        out.expect_code(64);
        assert!(
            out.stderr.contains("<SCHEDULE> <NAME> -- <CMD>..."),
            "{args:?}: {out}"
        );
        assert!(!db.file_exists(), "{args:?} created the database");
    }
}

/// `--cron EXPR NAME`: ticks on the cron expression's instants (every second here), with
/// TENURE_TICK_MS; stops on SIGTERM.
#[test]
fn cron_schedule_runs_ticks() {
    let db = sqlite();
    let log = db.dir().join("ticks.log");
    let line = format!("echo \"$TENURE_TICK_MS\" >> {}", log.display());
    let mut every = Background::spawn(db.tenure().args([
        "every",
        "--cron",
        "* * * * * *",
        "crontick",
        "--ttl",
        "2s",
        "--",
        "sh",
        "-c",
        &line,
    ]));
    // Two ticks a second apart; if they never come, what `tenure every` said is the clue.
    let deadline = Instant::now() + Duration::from_secs(30);
    let ticks = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let ticks: Vec<i64> = text.lines().filter_map(|l| l.parse().ok()).collect();
        if ticks.len() >= 2 {
            break ticks;
        }
        assert!(
            Instant::now() < deadline,
            "two ticks not logged within 30 s (logged: {ticks:?}); tenure every said:\n{}",
            every.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    every.signal(Signal::SIGTERM);
    let status = every.wait_timeout(Duration::from_secs(30));
    assert!(
        status.is_some(),
        "still running 30 s after SIGTERM:\n{}",
        every.stderr()
    );
    assert!(
        ticks.iter().all(|t| t % 1000 == 0) && ticks.windows(2).all(|w| w[0] < w[1]),
        "ticks not on whole seconds, or not increasing: {ticks:?}"
    );
}
