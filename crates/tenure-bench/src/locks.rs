//! Lock cycles — take a free lock, release it — per second and their latency, on one task and
//! on eight concurrent tasks (each on its own lock name): tenure's `Locks::try_lock` +
//! `LockGuard::release`, the raw SQL of [`crate::raw`], and etcd through its gateway. (kazoo's
//! Lock runs in Python processes of its own: [`crate::zookeeper::ZooKeeper::lock_cycles`].)

use crate::etcd::Http;
use crate::raw::Raw;
use crate::report::percentile;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tenure::{LockOptions, Locks};
use tokio::time::Instant;

/// What takes and releases.
pub enum System {
    Tenure(Locks),
    Raw(Raw),
    /// etcd with one session lease shared by every lock, as `concurrency.Session` does.
    Etcd {
        http: Http,
        lease: String,
    },
}

impl System {
    async fn cycle(&self, name: &str) -> Result<(), String> {
        match self {
            System::Tenure(locks) => {
                let guard = locks
                    .try_lock(name, LockOptions::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("tenure: {name} was not free"))?;
                guard.release().await.map_err(|e| e.to_string())
            }
            System::Raw(raw) => {
                let term = raw
                    .take(name, "bench")
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("raw: {name} was not free"))?;
                raw.release(name, "bench", term)
                    .await
                    .map_err(|e| e.to_string())
            }
            System::Etcd { http, lease } => {
                http.try_lock(name, lease)
                    .await?
                    .ok_or_else(|| format!("etcd: {name} was not free"))?;
                http.unlock(name).await
            }
        }
    }
}

/// Cycles per second and latency of one configuration.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Throughput {
    pub tasks: usize,
    pub cycles: usize,
    pub per_second: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub errors: usize,
    pub first_error: Option<String>,
}

/// Lock names of task `i`.
pub fn lock_name(i: usize) -> String {
    format!("lock-{i}")
}

/// Runs `tasks` concurrent loops of cycles for `warmup + run`; counts the cycles that started
/// after the warm-up.
pub async fn measure(
    system: Arc<System>,
    tasks: usize,
    warmup: Duration,
    run: Duration,
) -> Throughput {
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + run;
    let mut handles = Vec::new();
    for i in 0..tasks {
        let system = system.clone();
        handles.push(tokio::spawn(async move {
            let name = lock_name(i);
            let mut latencies = Vec::new();
            let mut errors = 0;
            let mut first_error = None;
            while Instant::now() < end {
                let t0 = Instant::now();
                let outcome = system.cycle(&name).await;
                let took = t0.elapsed();
                if t0 < measure_from {
                    continue;
                }
                match outcome {
                    Ok(()) => latencies.push(took.as_secs_f64() * 1e3),
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e);
                        // A lock left held (a failed release) would fail every later cycle.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            (latencies, errors, first_error)
        }));
    }
    let mut parts = Vec::new();
    for h in handles {
        if let Ok(part) = h.await {
            parts.push(part);
        }
    }
    Throughput::merge(tasks, run, parts)
}

impl Throughput {
    /// The figures of every task's `(latencies in ms, errors, first error)`.
    pub fn merge(
        tasks: usize,
        run: Duration,
        parts: impl IntoIterator<Item = (Vec<f64>, usize, Option<String>)>,
    ) -> Throughput {
        let mut all = Vec::new();
        let (mut errors, mut first_error) = (0, None);
        for (latencies, e, first) in parts {
            all.extend(latencies);
            errors += e;
            first_error = first_error.or(first);
        }
        Throughput {
            tasks,
            cycles: all.len(),
            per_second: all.len() as f64 / run.as_secs_f64(),
            p50_ms: percentile(&all, 50.0),
            p99_ms: percentile(&all, 99.0),
            errors,
            first_error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_merge_into_one_figure() {
        let t = Throughput::merge(
            2,
            Duration::from_secs(2),
            [
                (vec![1.0, 3.0], 0, None),
                (vec![2.0, 4.0], 2, Some("busy".to_string())),
                (vec![], 1, Some("later".to_string())),
            ],
        );
        assert_eq!((t.tasks, t.cycles, t.errors), (2, 4, 3));
        assert_eq!(t.per_second, 2.0);
        assert_eq!((t.p50_ms, t.p99_ms), (Some(2.0), Some(4.0)));
        assert_eq!(t.first_error.as_deref(), Some("busy"));
        assert_eq!(
            Throughput::merge(1, Duration::from_secs(1), []).p50_ms,
            None
        );
    }
}
