//! etcd's API on tenure (`tenure serve --etcd-listen`) beside a real etcd, in one run: lock
//! cycles through the gateway (the same `txn` + `delete` as etcd's row), `etcdctl lock`
//! handoff, watch latency (a put through one server, its event on a watch of the same server
//! and of another server on the same database), and 10,000 leases kept alive
//! ([`etcd_leases`]).
//!
//! Two `tenure serve` run on the backend's database (tables `<run>e_*`), started and killed
//! by the benchmark. [`rows`] sets their figures beside etcd's, which [`watch_latency`] and
//! the lock and handover benchmarks measured once before the backends.

use crate::db::{Engine, Target};
use crate::etcd::Http;
use crate::etcd_leases;
use crate::failover::{self, Contender, Scenario, Setup};
use crate::locks::{self, System};
use crate::peer::Peer;
use crate::plan::Plan;
use crate::procs::Proc;
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

/// `tenure serve --etcd-listen` processes on one database.
pub(crate) struct Served {
    pub(crate) procs: Vec<Proc>,
    /// `http://127.0.0.1:PORT` of each one's etcd API.
    pub(crate) etcd: Vec<String>,
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
    pub(crate) async fn database_calls(&self, op: &str) -> f64 {
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
    let n = if plan.opts.quick { 1_000 } else { 10_000 };
    rows.extend(etcd_leases::rows(target, served, key, n).await?);
    Ok(rows)
}
