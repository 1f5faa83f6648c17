//! 10,000 leases kept alive through `tenure serve --etcd-listen` (part of the etcd-api
//! benchmark, [`crate::etcd_api`]): granted through the first server, then each kept alive
//! once in 20 s, in two shapes — through the gateway by 8 clients that each wait for their
//! answer, then through one gRPC KeepAlive stream as Go's lessor sends on it — with what each
//! costs the database (its CPU in the window, the servers' keep-alive transactions).

use crate::db::{Engine, Target};
use crate::etcd::Http;
use crate::etcd_api::Served;
use crate::procs::pid_cpu;
use crate::report::{Row, Verdict};
use serde_json::json;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The granted TTL of the kept-alive leases, and how often each is kept alive (a third of it,
/// as etcd's clients do).
const LEASE_TTL_S: u64 = 60;
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(20);

/// The rows of `n` leases kept alive through `served`, in both shapes (the same leases).
pub(crate) async fn rows(
    target: &Target,
    served: &Served,
    key: &str,
    n: usize,
) -> Result<Vec<Row>, String> {
    let (slices, granted_s) = grant(served, n).await?;
    let mut rows = Vec::new();
    for (shape, how) in [
        (Shape::Gateway, "through the gateway, 8 clients"),
        (Shape::Stream, "through one gRPC stream, as Go's lessor"),
    ] {
        let kept = keep_alive(target, served, &slices, granted_s, shape).await?;
        rows.push(kept_alive_row(target, key, how, &kept));
    }
    Ok(rows)
}

/// What `n` leases kept alive cost.
struct KeptAlive {
    leases: usize,
    granted_s: f64,
    window_s: f64,
    keep_alives: usize,
    failed: usize,
    /// CPU seconds of the database in the window (see [`database_cpu`]).
    cpu_s: Option<f64>,
    /// Keep-alive transactions of the servers in the window.
    transactions: f64,
}

/// Grants `n` leases through the first server (8 tasks): their ids in 8 slices, and the
/// seconds it took.
async fn grant(served: &Served, n: usize) -> Result<(Vec<Vec<i64>>, f64), String> {
    let http = Http::new(&served.etcd[0]);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let http = http.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in (t..n).step_by(8) {
                let id = http.grant(LEASE_TTL_S).await?;
                ids.push(
                    id.parse::<i64>()
                        .map_err(|e| format!("lease id {id}: {e}"))?,
                );
            }
            Ok::<_, String>(ids)
        }));
    }
    let mut slices = Vec::new();
    for t in tasks {
        slices.push(t.await.map_err(|e| e.to_string())??);
    }
    Ok((slices, started.elapsed().as_secs_f64()))
}

/// How keep-alives reach the server.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `POST /v3/lease/keepalive` through the gateway, 8 tasks, each waiting for its answer
    /// before the next (as Patroni and other HTTP clients do).
    Gateway,
    /// One gRPC KeepAlive stream, as Go's lessor sends on it: every 500 ms, the request of
    /// every lease then due, all at once; answers read as they come.
    Stream,
}

/// Keeps every lease of `slices` alive once per `KEEP_ALIVE_EVERY` (each at its own moment,
/// spread over the interval) for one such interval, counting the database's CPU and the
/// servers' keep-alive transactions.
async fn keep_alive(
    target: &Target,
    served: &Served,
    slices: &[Vec<i64>],
    granted_s: f64,
    shape: Shape,
) -> Result<KeptAlive, String> {
    let pids: Vec<i32> = served.procs.iter().map(|p| p.pid).collect();
    let cpu_before = database_cpu(target, &pids).await;
    let calls_before = served.database_calls("etcd_keep_alive").await;
    let window_start = Instant::now();
    let (keep_alives, failed) = match shape {
        Shape::Gateway => through_gateway(served, slices, window_start).await?,
        Shape::Stream => through_stream(served, slices, window_start).await?,
    };
    let window_s = window_start.elapsed().as_secs_f64();
    let cpu_after = database_cpu(target, &pids).await;
    let transactions = served.database_calls("etcd_keep_alive").await - calls_before;
    Ok(KeptAlive {
        leases: slices.iter().map(Vec::len).sum(),
        granted_s,
        window_s,
        keep_alives,
        failed,
        cpu_s: cpu_after.zip(cpu_before).map(|(a, b)| a - b),
        transactions,
    })
}

/// [`Shape::Gateway`]: (kept alive, failed).
async fn through_gateway(
    served: &Served,
    slices: &[Vec<i64>],
    window_start: Instant,
) -> Result<(usize, usize), String> {
    let http = Http::new(&served.etcd[0]);
    let mut tasks = Vec::new();
    for ids in slices {
        let (http, ids) = (http.clone(), ids.clone());
        tasks.push(tokio::spawn(async move {
            let step = KEEP_ALIVE_EVERY.div_f64(ids.len().max(1) as f64);
            let (mut ok, mut failed) = (0, 0);
            for (j, id) in ids.iter().enumerate() {
                tokio::time::sleep_until(window_start + step.mul_f64(j as f64)).await;
                let answer = http
                    .post("/v3/lease/keepalive", &json!({ "ID": id.to_string() }))
                    .await;
                let ttl = answer
                    .ok()
                    .and_then(|v| v["result"]["TTL"].as_str()?.parse::<i64>().ok())
                    .unwrap_or(0);
                if ttl > 0 {
                    ok += 1;
                } else {
                    failed += 1;
                }
            }
            (ok, failed)
        }));
    }
    let (mut keep_alives, mut failed) = (0, 0);
    for t in tasks {
        let (ok, bad) = t.await.map_err(|e| e.to_string())?;
        keep_alives += ok;
        failed += bad;
    }
    Ok((keep_alives, failed))
}

/// [`Shape::Stream`]: (kept alive, failed).
async fn through_stream(
    served: &Served,
    slices: &[Vec<i64>],
    window_start: Instant,
) -> Result<(usize, usize), String> {
    use tenure_etcd_proto::etcdserverpb::lease_client::LeaseClient;
    use tenure_etcd_proto::etcdserverpb::LeaseKeepAliveRequest;
    let ids: Vec<i64> = slices.iter().flatten().copied().collect();
    let n = ids.len();
    let mut client = LeaseClient::connect(served.etcd[0].clone())
        .await
        .map_err(|e| format!("gRPC connect: {e}"))?;
    let (tx, rx) = mpsc::channel(n.max(1));
    let mut answers = client
        .lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .map_err(|e| format!("KeepAlive: {e}"))?
        .into_inner();
    let sender = tokio::spawn(async move {
        let step = KEEP_ALIVE_EVERY.div_f64(n.max(1) as f64);
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut next = 0;
        while next < n {
            tick.tick().await;
            let now = window_start.elapsed();
            while next < n && step.mul_f64(next as f64) <= now {
                let request = LeaseKeepAliveRequest { id: ids[next] };
                if tx.send(request).await.is_err() {
                    return;
                }
                next += 1;
            }
        }
        // Open until every answer is read: the reader ends the stream.
        tx.closed().await;
    });
    let (mut ok, mut failed) = (0, 0);
    while ok + failed < n {
        match tokio::time::timeout(Duration::from_secs(30), answers.message()).await {
            Ok(Ok(Some(answer))) if answer.ttl > 0 => ok += 1,
            Ok(Ok(Some(_))) => failed += 1,
            Ok(Ok(None)) => return Err("KeepAlive: the stream ended early".into()),
            Ok(Err(e)) => return Err(format!("KeepAlive: {e}")),
            Err(_) => return Err("KeepAlive: no answer within 30 s".into()),
        }
    }
    drop(answers);
    sender.abort();
    Ok((ok, failed))
}

/// CPU seconds the database has used: PostgreSQL's backends of this database and its WAL
/// writer, checkpointer and background writer; MariaDB's whole server process; SQLite's, which
/// runs inside the servers, the servers' own (an upper bound: their HTTP work included).
async fn database_cpu(target: &Target, serves: &[i32]) -> Option<f64> {
    let pids: Vec<i32> = match target.engine {
        Engine::Sqlite => serves.to_vec(),
        Engine::MySql => procs_named(&["mariadbd", "mysqld"]),
        Engine::Postgres => {
            let pool = target.raw_pool(1).await.ok()?;
            let q = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() OR \
                     backend_type IN ('walwriter', 'checkpointer', 'background writer')";
            let pids = match &pool {
                crate::db::Pool::Pg(p) => sqlx::query_scalar::<_, i32>(q).fetch_all(p).await.ok(),
                _ => None,
            };
            pool.close().await;
            pids?
        }
    };
    Some(
        pids.iter()
            .filter_map(|&p| pid_cpu(p))
            .map(|d| d.as_secs_f64())
            .sum(),
    )
}

/// Pids of the processes whose name is one of `names`.
fn procs_named(names: &[&str]) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| names.contains(&c.trim()))
        })
        .collect()
}

/// The row of [`keep_alive`]'s figures.
fn kept_alive_row(target: &Target, key: &str, how: &str, kept: &KeptAlive) -> Row {
    let core = kept.cpu_s.map(|c| 100.0 * c / kept.window_s);
    eprintln!(
        "  {key} etcd API: {} leases granted in {:.1} s; {} keep-alives ({} failed) {how} in \
         {:.1} s; database CPU {:?} s; {} keep-alive transactions",
        kept.leases,
        kept.granted_s,
        kept.keep_alives,
        kept.failed,
        kept.window_s,
        kept.cpu_s,
        kept.transactions
    );
    let what = match target.engine {
        Engine::Sqlite => "the two servers' CPU (SQLite runs inside them)",
        Engine::MySql => "mariadbd's CPU",
        Engine::Postgres => "the database's backends' CPU",
    };
    Row::new(
        format!(
            "etcd API: {} leases kept alive {how} (TTL {LEASE_TTL_S} s, each every {} s)",
            kept.leases,
            KEEP_ALIVE_EVERY.as_secs()
        ),
        format!(
            "{} of a core ({what}); {} keep-alives, {} failed; {:.0} transactions",
            core.map_or("?".to_string(), |c| format!("{c:.1} %")),
            kept.keep_alives,
            kept.failed,
            kept.transactions
        ),
    )
    .goal(
        "< 5 % of a core, none failed",
        Verdict::all(&[
            Verdict::from(core.is_some_and(|c| c < 5.0)),
            Verdict::from(kept.failed == 0),
        ]),
    )
}
