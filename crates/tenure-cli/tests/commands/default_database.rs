//! The default database: an SQLite file in the user's state directory, named on start.

use crate::support::*;
use serde_json::json;
use tenure::Store;

#[tokio::test]
async fn default_database_is_a_file_in_the_state_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state");
    let name = unique("default");
    let path = state.join("tenure").join("tenure.db");
    let url = format!("sqlite://{}", path.display());

    let out = run(tenure()
        .env("XDG_STATE_HOME", &state)
        .args(["pause", &name, "--json"]));
    out.expect_code(0);
    assert_eq!(out.banner(), Some(url.as_str()), "{out}");
    assert_eq!(
        out.stderr,
        format!("tenure: database {url}\n"),
        "the path is the only thing said"
    );
    assert!(path.is_file(), "{} missing", path.display());

    // A second process ("another terminal") and the library see the same database.
    let out = run(tenure()
        .env("XDG_STATE_HOME", &state)
        .args(["status", "--json"]));
    out.expect_code(0);
    assert_eq!(out.banner(), Some(url.as_str()));
    assert_eq!(out.json()["leases"][0]["name"], json!(name));
    assert_eq!(out.json()["leases"][0]["paused"], json!(true));
    let store = Store::connect(&url)
        .await
        .expect("library on the default file");
    let snapshot = store.get(&name).await.expect("get");
    assert!(snapshot.leases[0].paused);

    // -q hides the banner.
    let out = run(tenure()
        .env("XDG_STATE_HOME", &state)
        .args(["-q", "leader", &name, "--json"]));
    out.expect_code(0);
    assert_eq!(out.stderr, "");

    // Without XDG_STATE_HOME (or with it empty): ~/.local/state.
    let home = dir.path().join("home");
    let home_path = home.join(".local/state/tenure/tenure.db");
    for xdg in [None, Some("")] {
        let mut command = tenure();
        command.env("HOME", &home);
        match xdg {
            Some(v) => command.env("XDG_STATE_HOME", v),
            None => command.env_remove("XDG_STATE_HOME"),
        };
        let out = run(command.args(["status", "--json"]));
        out.expect_code(0);
        let expected = format!("sqlite://{}", home_path.display());
        assert_eq!(out.banner(), Some(expected.as_str()), "{out}");
        assert!(home_path.is_file());
    }

    // Printing the DDL of the default database creates nothing.
    let untouched = dir.path().join("untouched");
    let out = run(tenure()
        .env("XDG_STATE_HOME", &untouched)
        .args(["migrate", "--print"]));
    out.expect_code(0);
    assert!(out.stdout.contains("AUTOINCREMENT"), "SQLite DDL:\n{out}");
    assert!(
        !untouched.exists(),
        "migrate --print created the state directory"
    );

    // Neither: a usage error that says what to do.
    let out = run(tenure()
        .env_remove("XDG_STATE_HOME")
        .env_remove("HOME")
        .args(["status"]));
    out.expect_code(64);
    assert!(out.message_lines()[0].contains("--database-url"), "{out}");
}
