//! etcd's API on tenure (`tenure serve --etcd-listen`) beside a real etcd, in one run: lock
//! cycles through the gateway (the same `txn` + `delete` as etcd's row), `etcdctl lock`
//! handoff, watch latency (a put through one server, its event on a watch of the same server
//! and of another server on the same database), and 10,000 leases kept alive through the
//! gateway and through one gRPC KeepAlive stream (as Go's lessor): what they cost the
//! database.
//!
//! Two `tenure serve` run on the backend's database (tables `<run>e_*`), started and killed
//! by the benchmark. [`rows`] sets their figures beside etcd's, which [`watch_latency`] and
//! the lock and handover benchmarks measured once before the backends.

use crate::db::{Engine, Target};
use crate::etcd::Http;
use crate::failover::{self, Contender, Scenario, Setup};
use crate::locks::{self, System};
use crate::peer::Peer;
use crate::plan::Plan;
use crate::procs::{pid_cpu, Proc};
use crate::report::{
    at_least, at_most, cycles, millis_summary, ratio, times, Row, Summary, Verdict,
};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The table prefix of the etcd API's tables within the run's (dropped with the run's).
pub(crate) const PREFIX: &str = "e_";

/// Puts measured per watch-latency figure.
const WATCH_SAMPLES: usize = 200;

/// The granted TTL of the kept-alive leases, and how often each is kept alive (a third of it,
/// as etcd's clients do).
const LEASE_TTL_S: u64 = 60;
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(20);

/// `tenure serve --etcd-listen` processes on one database.
struct Served {
    procs: Vec<Proc>,
    /// `http://127.0.0.1:PORT` of each one's etcd API.
    etcd: Vec<String>,
    /// `http://127.0.0.1:PORT` of each one's house (its `/metrics`).
    house: Vec<String>,
}

impl Served {
    /// Starts `n` servers, one after the other (the first creates the tables), each answering
    /// etcd's `/version` before the next starts.
    async fn start(plan: &Plan, target: &Target, n: usize) -> Result<Served, String> {
        let mut served = Served {
            procs: Vec::new(),
            etcd: Vec::new(),
            house: Vec::new(),
        };
        for k in 0..n {
            let (house, etcd) = (free_port()?, free_port()?);
            let mut cmd = Command::new(&plan.tenure);
            cmd.arg("--database-url")
                .arg(&target.url)
                .arg("--table-prefix")
                .arg(format!("{}{PREFIX}", target.prefix))
                .arg("serve")
                .arg("--listen")
                .arg(format!("127.0.0.1:{house}"))
                .arg("--etcd-listen")
                .arg(format!("127.0.0.1:{etcd}"));
            let log = plan
                .dir
                .join(format!("etcd-api-{}-{k}.log", target.engine.key()));
            let proc = Proc::spawn(cmd, &log).map_err(|e| format!("cannot start serve: {e}"))?;
            served.procs.push(proc);
            let endpoint = format!("http://127.0.0.1:{etcd}");
            let http = Http::new(&endpoint);
            let deadline = Instant::now() + Duration::from_secs(30);
            while http.get("/version").await.is_err() {
                if Instant::now() >= deadline {
                    return Err(format!(
                        "tenure serve --etcd-listen did not answer within 30 s (see {})",
                        log.display()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            served.etcd.push(endpoint);
            served.house.push(format!("http://127.0.0.1:{house}"));
        }
        Ok(served)
    }

    async fn stop(self) {
        for p in self.procs {
            p.finish(Duration::ZERO).await;
        }
    }

    /// The database transactions of `op` each server has counted
    /// (`tenure_database_seconds_count{op=…}` of its `/metrics`), summed.
    async fn database_calls(&self, op: &str) -> f64 {
        let mut total = 0.0;
        for house in &self.house {
            let Ok(text) = get_text(&format!("{house}/metrics")).await else {
                continue;
            };
            let label = format!("op=\"{op}\"");
            total += text
                .lines()
                .filter(|l| l.starts_with("tenure_database_seconds_count{") && l.contains(&label))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>();
        }
        total
    }
}

/// A free port on 127.0.0.1 (free when asked: the server binds it a moment later).
fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

async fn get_text(url: &str) -> Result<String, String> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = hyper::Request::get(url)
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let res = client.request(req).await.map_err(|e| e.to_string())?;
    let body = res.into_body().collect().await.map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&body.to_bytes()).into_owned())
}

/// Watch latency: `WATCH_SAMPLES` puts of `key` through `put_at`, each sample the time from
/// sending the put to its event arriving on a watch of `key` opened on `watch_at` (etcd's
/// JSON gateway: `POST /v3/watch`, one `{"result": …}` a line). Milliseconds.
pub(crate) async fn watch_latency(
    put_at: &str,
    watch_at: &str,
    key: &str,
    samples: usize,
) -> Result<Summary, String> {
    let k = B64.encode(key);
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = hyper::Request::post(format!("{watch_at}/v3/watch"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(
            json!({ "create_request": { "key": k } }).to_string(),
        )))
        .map_err(|e| e.to_string())?;
    let res = tokio::time::timeout(Duration::from_secs(5), client.request(req))
        .await
        .map_err(|_| "watch: no answer within 5 s".to_string())?
        .map_err(|e| format!("watch: {e}"))?;
    let mut body = res.into_body();
    let (events, mut arrived) = mpsc::unbounded_channel::<(String, Instant)>();
    let (created, was_created) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        let mut created = Some(created);
        let mut buffer = Vec::new();
        while let Some(Ok(frame)) = body.frame().await {
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let at = Instant::now();
            buffer.extend_from_slice(&data);
            while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                let Ok(v) = serde_json::from_slice::<Value>(&line) else {
                    continue;
                };
                let result = &v["result"];
                if result["created"].as_bool() == Some(true) {
                    if let Some(c) = created.take() {
                        let _ = c.send(());
                    }
                }
                for e in result["events"].as_array().into_iter().flatten() {
                    let value = e["kv"]["value"].as_str().unwrap_or_default().to_string();
                    let _ = events.send((value, at));
                }
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(5), was_created)
        .await
        .map_err(|_| "watch: not created within 5 s".to_string())?
        .map_err(|_| "watch: the stream ended before it was created".to_string())?;
    let http = Http::new(put_at);
    let mut latencies = Vec::new();
    let mut failed = 0;
    for i in 0..samples {
        let value = B64.encode(format!("w{i}"));
        let sent = Instant::now();
        if http
            .post("/v3/kv/put", &json!({ "key": k, "value": value }))
            .await
            .is_err()
        {
            failed += 1;
            continue;
        }
        let deadline = sent + Duration::from_secs(5);
        loop {
            match tokio::time::timeout_at(deadline, arrived.recv()).await {
                Ok(Some((v, at))) if v == value => {
                    latencies.push(at.duration_since(sent).as_secs_f64() * 1e3);
                    break;
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => {
                    failed += 1;
                    break;
                }
            }
        }
    }
    reader.abort();
    Ok(Summary::of(&latencies, failed))
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

/// The etcd API's rows of one backend, beside etcd's figures in `peers`.
pub(crate) async fn rows(plan: &Plan, target: &Target, peers: &[Peer]) -> Result<Vec<Row>, String> {
    let key = target.engine.key();
    let etcd = peers.iter().find(|p| p.name == "etcd");
    let served = Served::start(plan, target, 2).await?;
    let outcome = measure(plan, target, &served, etcd, key).await;
    served.stop().await;
    outcome
}

async fn measure(
    plan: &Plan,
    target: &Target,
    served: &Served,
    etcd: Option<&Peer>,
    key: &str,
) -> Result<Vec<Row>, String> {
    let server = target.engine != Engine::Sqlite;
    let mut rows = Vec::new();
    // Lock cycles: the same client and requests as etcd's row.
    let http = Http::new(&served.etcd[0]);
    let lease = http.grant(60).await?;
    let system = Arc::new(System::Etcd {
        http: Box::new(http),
        lease,
    });
    let warmup = Duration::from_millis(500);
    for tasks in [1, 8] {
        let ours = locks::measure(system.clone(), tasks, warmup, plan.lock_run).await;
        eprintln!(
            "  {key} etcd API lock cycles, {tasks} task(s): {}",
            cycles(&ours)
        );
        let measure = format!(
            "etcd API: lock cycles (txn + delete), {tasks} {}",
            if tasks == 1 { "task" } else { "tasks" }
        );
        let theirs = etcd.and_then(|e| {
            if tasks == 1 {
                e.locks1.clone()
            } else {
                e.locks8.clone()
            }
        });
        let r = ratio(Some(ours.per_second), theirs.as_ref().map(|t| t.per_second));
        let mut row = Row::new(&measure, cycles(&ours)).against(
            "etcd txn + delete",
            theirs.as_ref().map_or("—".to_string(), cycles),
            times(r),
        );
        if server {
            row = row.goal("≥ 1.0× etcd", at_least(r, 1.0));
        }
        rows.push(row);
    }
    // `etcdctl lock` handoff through the first server.
    let setup = Setup {
        contender: Contender::Etcd {
            etcdctl: plan.opts.etcdctl_bin.clone(),
            endpoint: served.etcd[0].clone(),
        },
        bench: plan.bench.clone(),
        ttl: plan.opts.ttl,
        dir: plan.dir.clone(),
        name: format!("{key}-etcd-api-handover"),
    };
    let label = format!("{key} etcd API handover");
    let handoff = crate::report::ms(
        &failover::measure(&setup, Scenario::Handover, plan.trials, &label).await?,
    );
    let theirs = etcd
        .and_then(|e| e.handover.as_ref())
        .map(crate::report::ms);
    let r = ratio(handoff.p50, theirs.as_ref().and_then(|t| t.p50));
    rows.push(
        Row::new("etcd API: etcdctl lock handoff", millis_summary(&handoff))
            .against(
                "etcdctl lock on etcd",
                theirs.as_ref().map_or("—".to_string(), millis_summary),
                times(r),
            )
            .goal("p50 ≤ 1.5× etcd", at_most(r, 1.5)),
    );
    // Watch latency: on the server of the put, and on the other one.
    let theirs = etcd.and_then(|e| e.watch.clone());
    let poll_ms = 1000.0;
    for (name, watch_at) in [
        ("same server", &served.etcd[0]),
        ("another server", &served.etcd[1]),
    ] {
        let w = watch_latency(
            &served.etcd[0],
            watch_at,
            &format!("watched-{name}"),
            WATCH_SAMPLES,
        )
        .await?;
        eprintln!(
            "  {key} etcd API watch latency, {name}: {}",
            millis_summary(&w)
        );
        let (goal, verdict) = match target.engine {
            Engine::MySql => ("p99 ≤ poll interval (1 s)", at_most(w.p99, poll_ms)),
            _ => ("p50 ≤ 5 ms (NOTIFY, doorbell)", at_most(w.p50, 5.0)),
        };
        rows.push(
            Row::new(
                format!("etcd API: watch event after put, {name}"),
                millis_summary(&w),
            )
            .against(
                "etcd, one member",
                theirs.as_ref().map_or("—".to_string(), millis_summary),
                times(ratio(w.p50, theirs.as_ref().and_then(|t| t.p50))),
            )
            .goal(goal, Verdict::all(&[verdict, Verdict::from(w.failed == 0)])),
        );
    }
    // Leases kept alive: through the gateway, then (the same leases) through one stream.
    let n = if plan.opts.quick { 1_000 } else { 10_000 };
    let (slices, granted_s) = grant(served, n).await?;
    for (shape, how) in [
        (Shape::Gateway, "through the gateway, 8 clients"),
        (Shape::Stream, "through one gRPC stream, as Go's lessor"),
    ] {
        let kept = keep_alive(target, served, &slices, granted_s, shape).await?;
        rows.push(kept_alive_row(target, key, how, &kept));
    }
    Ok(rows)
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
