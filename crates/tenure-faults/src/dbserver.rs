//! The database servers as the nemesis sees them: a database of the suite's own, sessions
//! killed in a loop, and server restarts with a guard that brings the server back.
//!
//! Restarts use this machine's service commands (`pg_ctlcluster`, `mariadb-admin shutdown` and
//! `start-stop-daemon … mariadbd`), so they need a local server and root.

use std::process::Command;
use std::time::{Duration, Instant};
use tenure::BackendKind;

/// The database the suite creates for itself on a server, so that killing "every other
/// session" never touches anyone else's.
pub const DATABASE: &str = "tenure_faults";

/// The suite's database on the servers of `--postgres-url` and `--mysql-url`:
/// `$TENURE_FAULTS_DATABASE` (one of your own, when several people share the servers), or
/// [`DATABASE`].
pub fn database() -> String {
    std::env::var("TENURE_FAULTS_DATABASE")
        .ok()
        .filter(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or_else(|| DATABASE.to_string())
}

/// `url` with its database replaced by [`database`].
pub fn suite_url(url: &str) -> Result<String, String> {
    let mut parsed = url::Url::parse(url).map_err(|e| format!("{url}: {e}"))?;
    parsed.set_path(&format!("/{}", database()));
    Ok(parsed.to_string())
}

/// Creates [`database`] on the server of `url` if it does not exist.
pub async fn prepare(kind: BackendKind, url: &str) -> Result<(), String> {
    let database = database();
    match kind {
        BackendKind::Postgres => {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(url)
                .await
                .map_err(|e| format!("PostgreSQL at {url}: {e}"))?;
            let exists: Option<i32> =
                sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
                    .bind(&database)
                    .fetch_optional(&mut c)
                    .await
                    .map_err(|e| e.to_string())?;
            if exists.is_none() {
                sqlx::query(&format!("CREATE DATABASE {database}"))
                    .execute(&mut c)
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        BackendKind::MySql => {
            use sqlx::Connection;
            let mut c = sqlx::MySqlConnection::connect(url)
                .await
                .map_err(|e| format!("MariaDB at {url}: {e}"))?;
            sqlx::query(&format!("CREATE DATABASE IF NOT EXISTS {database}"))
                .execute(&mut c)
                .await
                .map_err(|e| e.to_string())?;
        }
        _ => {}
    }
    Ok(())
}

/// Kills every other session on [`database`]; returns how many.
pub async fn kill_sessions(kind: BackendKind, suite_url: &str) -> Result<u64, String> {
    use sqlx::Connection;
    let database = database();
    match kind {
        BackendKind::Postgres => {
            let mut c = sqlx::PgConnection::connect(suite_url)
                .await
                .map_err(|e| e.to_string())?;
            let killed: Vec<bool> = sqlx::query_scalar(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
            )
            .bind(&database)
            .fetch_all(&mut c)
            .await
            .map_err(|e| e.to_string())?;
            Ok(killed.into_iter().filter(|k| *k).count() as u64)
        }
        BackendKind::MySql => {
            let mut c = sqlx::MySqlConnection::connect(suite_url)
                .await
                .map_err(|e| e.to_string())?;
            let ids: Vec<i64> = sqlx::query_scalar(
                "SELECT id FROM information_schema.processlist \
                 WHERE db = ? AND id <> CONNECTION_ID()",
            )
            .bind(&database)
            .fetch_all(&mut c)
            .await
            .map_err(|e| e.to_string())?;
            let mut killed = 0;
            for id in ids {
                // The session may have ended meanwhile.
                if sqlx::query(&format!("KILL CONNECTION {id}"))
                    .execute(&mut c)
                    .await
                    .is_ok()
                {
                    killed += 1;
                }
            }
            Ok(killed)
        }
        _ => Ok(0),
    }
}

/// Why this machine cannot restart the server of `kind`, if it cannot.
pub fn cannot_restart(kind: BackendKind, url: &str) -> Option<String> {
    let host = url::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string));
    if !matches!(host.as_deref(), Some("127.0.0.1" | "localhost")) {
        return Some(format!("the server is not local ({url})"));
    }
    if !nix::unistd::Uid::effective().is_root() {
        return Some("restarting a server needs root".into());
    }
    let tool = match kind {
        BackendKind::Postgres => "/usr/bin/pg_ctlcluster",
        BackendKind::MySql => "/usr/sbin/mariadbd",
        _ => return Some("no server to restart".into()),
    };
    (!std::path::Path::new(tool).exists()).then(|| format!("{tool} not found"))
}

fn pg_version() -> Result<String, String> {
    std::fs::read_dir("/etc/postgresql")
        .map_err(|e| format!("/etc/postgresql: {e}"))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .max()
        .ok_or_else(|| "no cluster in /etc/postgresql".into())
}

fn sh(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn ready(kind: BackendKind) -> bool {
    match kind {
        BackendKind::Postgres => sh("pg_isready", &["-q", "-h", "127.0.0.1", "-p", "5432"]).is_ok(),
        _ => sh("mariadb-admin", &["-h", "127.0.0.1", "-u", "root", "ping"]).is_ok(),
    }
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > timeout {
            return Err(format!("{what} within {timeout:?}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Stops the server (fast shutdown: sessions are cut, commits kept).
pub fn stop(kind: BackendKind) -> Result<(), String> {
    match kind {
        BackendKind::Postgres => sh(
            "pg_ctlcluster",
            &[
                "--skip-systemctl-redirect",
                &pg_version()?,
                "main",
                "stop",
                "-m",
                "fast",
            ],
        ),
        _ => {
            sh(
                "mariadb-admin",
                &["-h", "127.0.0.1", "-u", "root", "shutdown"],
            )?;
            wait_until("MariaDB stopped", Duration::from_secs(30), || !ready(kind))
        }
    }
}

/// Starts the server if it is down and waits until it answers.
pub fn ensure_up(kind: BackendKind) -> Result<(), String> {
    if ready(kind) {
        return Ok(());
    }
    match kind {
        BackendKind::Postgres => sh(
            "pg_ctlcluster",
            &["--skip-systemctl-redirect", &pg_version()?, "main", "start"],
        )?,
        _ => sh(
            "start-stop-daemon",
            &[
                "--start",
                "--oknodo",
                "--background",
                "--exec",
                "/usr/sbin/mariadbd",
            ],
        )?,
    }
    wait_until("server up", Duration::from_secs(60), || ready(kind))
}

/// Brings the server back when dropped, whatever happened in between.
pub struct Restore(pub BackendKind);

impl Drop for Restore {
    fn drop(&mut self) {
        if let Err(e) = ensure_up(self.0) {
            eprintln!(
                "tenure-faults: could not restore the {:?} server: {e}",
                self.0
            );
        }
    }
}
