//! A backend wrapper that injects one fault, drawn from the schedule's seed, at each database
//! call of one holder: a delay before or after deciding, an error before deciding (nothing
//! changed) or after (the change landed), a hang past any timeout, or a late commit (the caller
//! gives up, the change lands later).

use crate::checker::Checker;
use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tenure::backend::{Backend, Renewed, TransactionBody};
use tenure::{Applied, BackendKind, DbTime, Effect, HistoryEntry, Op, RedactedUrl, Snapshot};
use tokio::sync::broadcast;

/// How often calls fail, and how.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FaultProfile {
    /// Probability of a fault at each call.
    pub rate: f64,
    /// Only delays (the order of calls changes, every call answers).
    pub delays_only: bool,
    /// The longest leg of an ordinary round trip: every call without another fault waits
    /// `0..=round_trip_ms` before deciding and again before answering, so that calls overlap.
    pub round_trip_ms: u64,
}

impl FaultProfile {
    pub(crate) const NONE: FaultProfile = FaultProfile {
        rate: 0.0,
        delays_only: true,
        round_trip_ms: 0,
    };
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// An ordinary round trip: its two legs.
    RoundTrip(Duration, Duration),
    DelayBefore(Duration),
    DelayAfter(Duration),
    ErrorBefore,
    ErrorAfter,
    Hang,
    LateCommit(Duration),
}

/// Longer than every timeout of a simulated call: a hung call is abandoned by its caller.
const HANG: Duration = Duration::from_secs(100);

#[derive(Debug)]
pub(crate) struct FaultyBackend {
    inner: Arc<dyn Backend>,
    /// The holder whose calls these are, for the trace.
    who: String,
    rng: Mutex<StdRng>,
    profile: FaultProfile,
    checker: Arc<Checker>,
}

impl FaultyBackend {
    pub(crate) fn new(
        inner: Arc<dyn Backend>,
        who: &str,
        seed: u64,
        profile: FaultProfile,
        checker: Arc<Checker>,
    ) -> FaultyBackend {
        FaultyBackend {
            inner,
            who: who.to_string(),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            profile,
            checker,
        }
    }

    fn draw(&self) -> Option<Fault> {
        let mut rng = self.rng.lock().unwrap();
        if self.profile.rate == 0.0 || !rng.gen_bool(self.profile.rate) {
            let legs = self.profile.round_trip_ms;
            return (legs > 0).then(|| {
                let before = Duration::from_millis(rng.gen_range(0..=legs));
                Fault::RoundTrip(before, Duration::from_millis(rng.gen_range(0..=legs)))
            });
        }
        let delay = Duration::from_millis(rng.gen_range(1..=150));
        let kinds = if self.profile.delays_only { 2 } else { 6 };
        Some(match rng.gen_range(0..kinds) {
            0 => Fault::DelayBefore(delay),
            1 => Fault::DelayAfter(delay),
            2 => Fault::ErrorBefore,
            3 => Fault::ErrorAfter,
            4 => Fault::Hang,
            _ => Fault::LateCommit(delay * 4),
        })
    }

    /// Runs `call` under `fault`.
    async fn inject<T, F>(&self, fault: Option<Fault>, call: F) -> tenure::Result<T>
    where
        T: Send + 'static,
        F: std::future::Future<Output = tenure::Result<T>> + Send + 'static,
    {
        let result = match fault {
            None => call.await,
            Some(Fault::RoundTrip(before, after)) => {
                tokio::time::sleep(before).await;
                let result = call.await;
                tokio::time::sleep(after).await;
                result
            }
            Some(Fault::DelayBefore(d)) => {
                tokio::time::sleep(d).await;
                call.await
            }
            Some(Fault::DelayAfter(d)) => {
                let result = call.await;
                tokio::time::sleep(d).await;
                result
            }
            Some(Fault::ErrorBefore) => Err(connection_reset()),
            Some(Fault::ErrorAfter) => call.await.and(Err(connection_reset())),
            Some(Fault::Hang) => {
                tokio::time::sleep(HANG).await;
                call.await
            }
            Some(Fault::LateCommit(d)) => {
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    let _ = call.await;
                });
                std::future::pending().await
            }
        };
        self.checker.check();
        result
    }
}

fn connection_reset() -> tenure::Error {
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected fault");
    tenure::Error::Database(sqlx::Error::Io(io))
}

fn op_word(op: &Op) -> &'static str {
    match op {
        Op::Campaign { .. } => "campaign",
        Op::Renew { .. } => "renew",
        Op::Succeed { .. } => "succeed",
        Op::Release { .. } => "release",
        Op::Demote { .. } => "demote",
        Op::Handover { .. } => "handover",
        Op::Pause => "pause",
        Op::Resume => "resume",
        _ => "another operation",
    }
}

fn outcome(result: &tenure::Result<Applied>) -> String {
    match result {
        Ok(applied) => {
            let term = applied.lease.as_ref().map_or(0, |l| l.term);
            match &applied.effect {
                Effect::Acquired { .. } | Effect::Renewed | Effect::Released => {
                    format!("{} term {term}", applied.effect.as_str())
                }
                other => other.as_str().to_string(),
            }
        }
        Err(e) => format!("error: {e}"),
    }
}

#[async_trait]
impl Backend for FaultyBackend {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }

    fn url(&self) -> &RedactedUrl {
        self.inner.url()
    }

    async fn apply(&self, name: &str, op: &Op, actor: &str) -> tenure::Result<Applied> {
        let fault = self.draw();
        let what = format!("{} {} {name}", self.who, op_word(op));
        if let Some(fault) = fault.filter(|f| !matches!(f, Fault::RoundTrip(..))) {
            self.checker.event(format!("{what}: fault {fault:?}"));
        }
        let (inner, name, op, actor) = (
            self.inner.clone(),
            name.to_string(),
            op.clone(),
            actor.to_string(),
        );
        let call = async move { inner.apply(&name, &op, &actor).await };
        let result = self.inject(fault, call).await;
        self.checker
            .event(format!("{what} -> {}", outcome(&result)));
        result
    }

    async fn renew_many(&self, holder: &str, leases: &[(String, u64)]) -> tenure::Result<Renewed> {
        let fault = self.draw();
        let what = format!("{} keep-alive {leases:?}", self.who);
        if let Some(fault) = fault.filter(|f| !matches!(f, Fault::RoundTrip(..))) {
            self.checker.event(format!("{what}: fault {fault:?}"));
        }
        let (inner, holder, leases) = (self.inner.clone(), holder.to_string(), leases.to_vec());
        let call = async move { inner.renew_many(&holder, &leases).await };
        let result = self.inject(fault, call).await;
        let answer = match &result {
            Ok(renewed) => {
                let kept: Vec<_> = renewed.leases.iter().map(|l| (&l.name, l.term)).collect();
                format!("renewed {kept:?}")
            }
            Err(e) => format!("error: {e}"),
        };
        self.checker.event(format!("{what} -> {answer}"));
        result
    }

    async fn last_tick(&self, name: &str) -> tenure::Result<(Option<i64>, DbTime)> {
        self.inner.last_tick(name).await
    }

    async fn complete_tick(
        &self,
        name: &str,
        holder: &str,
        term: u64,
        tick_ms: i64,
    ) -> tenure::Result<bool> {
        self.inner.complete_tick(name, holder, term, tick_ms).await
    }

    async fn get(&self, name: &str) -> tenure::Result<Snapshot> {
        self.inner.get(name).await
    }

    async fn list(&self) -> tenure::Result<Snapshot> {
        self.inner.list().await
    }

    async fn history(&self, name: &str, limit: u32) -> tenure::Result<Vec<HistoryEntry>> {
        self.inner.history(name, limit).await
    }

    async fn migrate(&self) -> tenure::Result<()> {
        self.inner.migrate().await
    }

    async fn check_schema(&self) -> tenure::Result<()> {
        self.inner.check_schema().await
    }

    fn schema_sql(&self) -> String {
        self.inner.schema_sql()
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        self.inner.subscribe()
    }

    /// A transaction (an elector's campaign through the candidate registry) meets the same
    /// faults as an operation, but a late commit: the body is borrowed, so the call cannot
    /// outlive the caller; it becomes an error after the commit, an ambiguity of its own.
    async fn transaction(&self, body: &mut dyn TransactionBody) -> tenure::Result<()> {
        let fault = self.draw().map(|f| match f {
            Fault::LateCommit(_) => Fault::ErrorAfter,
            other => other,
        });
        let what = format!("{} transaction", self.who);
        if let Some(fault) = fault.filter(|f| !matches!(f, Fault::RoundTrip(..))) {
            self.checker.event(format!("{what}: fault {fault:?}"));
        }
        let result = match fault {
            None => self.inner.transaction(body).await,
            Some(Fault::RoundTrip(before, after)) => {
                tokio::time::sleep(before).await;
                let result = self.inner.transaction(body).await;
                tokio::time::sleep(after).await;
                result
            }
            Some(Fault::DelayBefore(d)) => {
                tokio::time::sleep(d).await;
                self.inner.transaction(body).await
            }
            Some(Fault::DelayAfter(d)) => {
                let result = self.inner.transaction(body).await;
                tokio::time::sleep(d).await;
                result
            }
            Some(Fault::ErrorBefore) => Err(connection_reset()),
            Some(Fault::ErrorAfter | Fault::LateCommit(_)) => self
                .inner
                .transaction(body)
                .await
                .and(Err(connection_reset())),
            Some(Fault::Hang) => {
                tokio::time::sleep(HANG).await;
                self.inner.transaction(body).await
            }
        };
        self.checker.event(format!("{what} -> {result:?}"));
        self.checker.check();
        result
    }
}
