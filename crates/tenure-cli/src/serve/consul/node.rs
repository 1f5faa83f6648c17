//! This `tenure serve` instance as a Consul node: it keeps its sessions without TTL alive (a
//! heartbeat every quarter of the node lease), ends the sessions whose time ran out (a reap
//! every second, on every instance: the index row's lock serializes them), and publishes the
//! store-wide Consul index for blocking queries: read every poll interval, at once on a
//! PostgreSQL NOTIFY, and raised by this instance's own writes as they answer. When the
//! server stops gracefully the node leaves: its sessions without TTL end at once (their locks
//! released with their lock-delay), as a Consul agent's sessions do when it leaves.

use clap::Args;
use std::sync::Arc;
use std::time::Duration;
use tenure::consul::{Answer, Consul, Reply, Request};
use tenure::Store;
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// The Consul room's flags of `tenure serve`.
#[derive(Debug, Args)]
#[command(next_help_heading = "Consul API")]
pub(crate) struct ConsulArgs {
    /// This instance's Consul node name: sessions created here without a TTL live as long as
    /// it runs (renewed every ttl/4, ending one ttl after it stops). Default: the candidate id.
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// With --token-file, Consul API reads (GET /v1/kv, /v1/session) need the token too;
    /// writes always do.
    #[arg(long)]
    pub consul_reads_need_token: bool,
    /// The shortest session TTL accepted (Consul's session_ttl_min; GET /v1/agent/self tells
    /// clients). Default: 10s, Consul's. A TTL session lives twice its TTL after each renewal,
    /// and each renewal is a write: a short minimum lets clients fail over faster and write
    /// more often. At least the database timeout (--ttl/5 by default), so that a renewal that
    /// takes all of it still lands in time.
    #[arg(long, value_name = "DURATION", value_parser = crate::cli::duration)]
    pub session_ttl_min: Option<Duration>,
}

impl ConsulArgs {
    /// The shortest session TTL accepted: `--session-ttl-min`, else Consul's 10 s.
    pub(crate) fn session_ttl_min(&self) -> Duration {
        self.session_ttl_min
            .unwrap_or(tenure::consul::MIN_SESSION_TTL)
    }
}

/// The actor recorded in the lease history for the node's own upkeep.
const ACTOR: &str = "consul-node";

/// The node: its name, how long its sessions without TTL live past a heartbeat, and the
/// published index. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct ConsulNode {
    /// This instance's node name (sessions without TTL live as long as it does).
    pub name: String,
    /// How long a session without TTL lives past each heartbeat.
    pub lease: Duration,
    /// Reads (GET) also need the token, when the server has one.
    pub reads_need_token: bool,
    consul: Consul,
    index: Arc<watch::Sender<u64>>,
    tasks: Arc<Vec<AbortHandle>>,
}

impl ConsulNode {
    /// Starts the upkeep on the current runtime; the node accepts session TTLs from
    /// `session_ttl_min`.
    pub(crate) fn spawn(
        store: Store,
        name: String,
        lease: Duration,
        poll: Duration,
        session_ttl_min: Duration,
    ) -> ConsulNode {
        let (tx, _) = watch::channel(0u64);
        let index = Arc::new(tx);
        let consul = Consul::new(store).session_ttl_min(session_ttl_min);
        let heartbeat = tokio::spawn(upkeep(consul.clone(), name.clone(), lease)).abort_handle();
        let poller = tokio::spawn(poll_index(consul.clone(), index.clone(), poll)).abort_handle();
        ConsulNode {
            name,
            lease,
            reads_need_token: false,
            consul,
            index,
            tasks: Arc::new(vec![heartbeat, poller]),
        }
    }

    /// Runs one request of the Consul layer (see [`Consul::request`]).
    pub(crate) async fn request(
        &self,
        request: &Request,
        actor: &str,
    ) -> tenure::consul::Result<Answer> {
        self.consul.request(request, actor).await
    }

    /// Publishes `index` if it is newer (this instance's own write, as it answers).
    pub(crate) fn saw(&self, index: u64) {
        self.index.send_if_modified(|current| {
            let newer = index > *current;
            if newer {
                *current = index;
            }
            newer
        });
    }

    /// Waits until the published store index passes `index`, until `deadline` at most;
    /// whether it did.
    pub(crate) async fn wait_past(&self, index: u64, deadline: tokio::time::Instant) -> bool {
        let mut rx = self.index.subscribe();
        let passed = rx.wait_for(|current| *current > index);
        tokio::time::timeout_at(deadline, passed)
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The shortest session TTL this node accepts.
    pub(crate) fn session_ttl_min(&self) -> Duration {
        self.consul.min_session_ttl()
    }

    /// Stops the upkeep (the sessions without TTL then lapse after the node lease).
    pub(crate) fn stop(&self) {
        for task in self.tasks.iter() {
            task.abort();
        }
    }

    /// Stops the upkeep and leaves: this node's sessions without TTL are destroyed now (their
    /// locks released with lock-delay) instead of lapsing a node lease later. TTL sessions do
    /// not depend on the node and stay. A failure is logged; those sessions then lapse.
    pub(crate) async fn leave(&self) {
        self.stop();
        let listed = self
            .request(&Request::Sessions(Some(self.name.clone())), ACTOR)
            .await;
        let sessions = match listed {
            Ok(Answer {
                reply: Reply::Sessions(list),
                ..
            }) => list,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(error = %e, node = %self.name, "consul node could not list its sessions on leaving; they lapse after the node lease");
                return;
            }
        };
        let mut ended = 0;
        for session in sessions.into_iter().filter(|s| s.ttl.is_none()) {
            match self
                .request(&Request::DestroySession(session.id.clone()), ACTOR)
                .await
            {
                Ok(_) => ended += 1,
                Err(e) => {
                    tracing::warn!(error = %e, session = %session.id, "consul session not ended on leaving; it lapses after the node lease")
                }
            }
        }
        if ended > 0 {
            tracing::info!(sessions = ended, node = %self.name, "consul node left: its sessions without TTL ended");
        }
    }
}

/// Heartbeats every quarter of the lease, and a reap every second.
async fn upkeep(consul: Consul, node: String, lease: Duration) {
    let beat = (lease / 4).max(Duration::from_millis(50));
    let mut next_beat = tokio::time::Instant::now();
    let mut next_reap = tokio::time::Instant::now();
    loop {
        let now = tokio::time::Instant::now();
        if now >= next_beat {
            let request = Request::Heartbeat {
                node: node.clone(),
                lease,
            };
            if let Err(e) = consul.request(&request, ACTOR).await {
                tracing::warn!(error = %e, %node, "consul node heartbeat failed");
            }
            next_beat = now + beat;
        }
        if now >= next_reap {
            match consul.request(&Request::Reap { limit: 100 }, ACTOR).await {
                Ok(answer) => {
                    if let Reply::Reaped(n @ 1..) = answer.reply {
                        tracing::info!(sessions = n, "consul sessions expired");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "consul session reap failed"),
            }
            next_reap = now + Duration::from_secs(1);
        }
        tokio::time::sleep_until(next_beat.min(next_reap)).await;
    }
}

/// Reads the index every `poll` and on every notification but the etcd layer's
/// ([`crate::serve::beyond_etcd`]).
async fn poll_index(consul: Consul, index: Arc<watch::Sender<u64>>, poll: Duration) {
    let mut changes = consul.store().changes();
    loop {
        changes.skip_pending();
        if let Ok(answer) = consul.request(&Request::Index, ACTOR).await {
            index.send_if_modified(|current| {
                let moved = answer.index != *current;
                *current = answer.index;
                moved
            });
        }
        tokio::select! {
            () = tokio::time::sleep(poll) => {}
            () = changes.changed(crate::serve::beyond_etcd) => {}
        }
    }
}
