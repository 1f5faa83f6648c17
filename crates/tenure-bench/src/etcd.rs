//! A private etcd on 127.0.0.1 (temporary data dir, ports of its own), killed when dropped,
//! and a small client of its HTTP/JSON gateway (`/v3/kv/txn`, `/v3/kv/deleterange`,
//! `/v3/lease/grant`) over kept-alive HTTP/1.1 connections.

use crate::procs::Proc;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use tokio::process::Command;

/// The running server. Dropping it kills etcd and removes its data dir.
pub(crate) struct Etcd {
    proc: Option<Proc>,
    _data: tempfile::TempDir,
    pub endpoint: String,
    pub version: String,
}

impl Etcd {
    /// Starts `etcd_bin` with client port `port` and peer port `port + 10`, and waits until it
    /// answers.
    pub(crate) async fn start(etcd_bin: &Path, port: u16, log: &Path) -> Result<Etcd, String> {
        let data = tempfile::tempdir().map_err(|e| e.to_string())?;
        let client = format!("http://127.0.0.1:{port}");
        let peer = format!("http://127.0.0.1:{}", port + 10);
        let mut cmd = Command::new(etcd_bin);
        cmd.arg("--name")
            .arg("bench")
            .arg("--data-dir")
            .arg(data.path())
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("bench={peer}"))
            .arg("--log-level")
            .arg("warn");
        let proc = Proc::spawn(cmd, log)
            .map_err(|e| {
                format!(
                    "cannot start {}: {e} (install etcd 3.4 with `apt-get install etcd-server \
                     etcd-client`, pass --etcd-bin, or run only --only scale,footprint, which need no etcd)",
                    etcd_bin.display()
                )
            })?;
        let mut etcd = Etcd {
            proc: Some(proc),
            _data: data,
            endpoint: client,
            version: String::new(),
        };
        let http = Http::new(&etcd.endpoint);
        for _ in 0..100 {
            if let Ok(v) = http.get("/version").await {
                etcd.version = v["etcdserver"].as_str().unwrap_or("?").to_string();
                // The gateway answers before the member has elected itself: wait for a write.
                if http
                    .post(
                        "/v3/kv/put",
                        &json!({"key": B64.encode("probe"), "value": ""}),
                    )
                    .await
                    .is_ok()
                {
                    return Ok(etcd);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!(
            "etcd did not answer on {} within 10 s (see {})",
            etcd.endpoint,
            log.display()
        ))
    }

    /// Kills etcd now.
    pub(crate) async fn stop(mut self) {
        if let Some(p) = self.proc.take() {
            p.finish(Duration::ZERO).await;
        }
    }
}

/// JSON over HTTP/1.1 to etcd's gateway.
#[derive(Clone)]
pub(crate) struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    base: String,
}

impl Http {
    pub(crate) fn new(endpoint: &str) -> Http {
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build_http();
        Http {
            client,
            base: endpoint.to_string(),
        }
    }

    async fn send(&self, req: hyper::Request<Full<Bytes>>) -> Result<Value, String> {
        let res = tokio::time::timeout(Duration::from_secs(5), self.client.request(req))
            .await
            .map_err(|_| "etcd: no answer within 5 s".to_string())?
            .map_err(|e| format!("etcd: {e}"))?;
        let status = res.status();
        let body = res
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("etcd: {e}"))?
            .to_bytes();
        let value: Value = serde_json::from_slice(&body).map_err(|e| format!("etcd: {e}"))?;
        if !status.is_success() {
            return Err(format!("etcd: {status}: {value}"));
        }
        Ok(value)
    }

    pub(crate) async fn get(&self, path: &str) -> Result<Value, String> {
        let req = hyper::Request::get(format!("{}{path}", self.base))
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        self.send(req).await
    }

    pub(crate) async fn post(&self, path: &str, body: &Value) -> Result<Value, String> {
        let req = hyper::Request::post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| e.to_string())?;
        self.send(req).await
    }

    /// Grants a lease of `ttl_s` seconds; returns its id.
    pub(crate) async fn grant(&self, ttl_s: u64) -> Result<String, String> {
        let v = self
            .post("/v3/lease/grant", &json!({ "TTL": ttl_s }))
            .await?;
        v["ID"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("etcd: no lease id in {v}"))
    }

    /// etcd's `concurrency.Mutex` without the wait: puts `key` under `lease` if it does not
    /// exist (create revision 0), in one transaction. Returns the revision of the put (the
    /// fencing token, as `ETCD_LOCK_REV`) or `None` when someone holds it.
    pub(crate) async fn try_lock(&self, key: &str, lease: &str) -> Result<Option<i64>, String> {
        let k = B64.encode(key);
        let body = json!({
            "compare": [{ "key": k, "target": "CREATE", "result": "EQUAL", "create_revision": "0" }],
            "success": [{ "request_put": { "key": k, "value": B64.encode("bench"), "lease": lease } }],
        });
        let v = self.post("/v3/kv/txn", &body).await?;
        if v["succeeded"].as_bool() != Some(true) {
            return Ok(None);
        }
        let rev = v["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| format!("etcd: no revision in {v}"))?;
        Ok(Some(rev))
    }

    /// Deletes `key` (the unlock of `concurrency.Mutex`).
    pub(crate) async fn unlock(&self, key: &str) -> Result<(), String> {
        self.post("/v3/kv/deleterange", &json!({ "key": B64.encode(key) }))
            .await
            .map(|_| ())
    }
}

/// `etcdctl lock --ttl N NAME -- CMD…` against `endpoint` (without `--` etcdctl would read
/// CMD's options as its own).
pub(crate) fn lock_command(
    etcdctl: &Path,
    endpoint: &str,
    ttl_s: u64,
    name: &str,
    cmd: &[String],
) -> Command {
    let mut c = Command::new(etcdctl);
    c.env("ETCDCTL_API", "3")
        .arg("--endpoints")
        .arg(endpoint)
        .arg("lock")
        .arg("--ttl")
        .arg(ttl_s.to_string())
        .arg(name)
        .arg("--")
        .args(cmd);
    c
}
