//! `/v1/agent/*`: what a Consul client asks its agent. tenure serve is no agent: it answers
//! `GET /v1/agent/self` with the fields clients read (Patroni reads `Config.SessionTTLMin` to
//! adjust its TTL after an "Invalid Session TTL"), and every other agent endpoint (service
//! registration, checks, members, DNS) with Consul's status for an endpoint it does not have,
//! 404, and a body saying so.

use super::{Answered, Call, ConsulError};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;
use tenure::consul::go_duration;

/// Consul's default datacenter, which a tenure serve reports as its own.
const DATACENTER: &str = "dc1";

/// `GET /v1/agent/self`: this instance as an agent describes itself — its node, its version
/// (tenure's), and the session TTL minimum in both shapes clients read: `Config.SessionTTLMin`
/// in nanoseconds (the older agents' shape, which Patroni reads) and `DebugConfig.SessionTTLMin`
/// in Go's duration syntax (today's).
pub(super) async fn me(call: Call) -> Answered {
    let node = &call.state.0.consul.name;
    let min = call.state.0.consul.session_ttl_min();
    let min_ns = u64::try_from(min.as_nanos()).unwrap_or(u64::MAX);
    let body = json!({
        "Config": {
            "Datacenter": DATACENTER,
            "PrimaryDatacenter": DATACENTER,
            "NodeName": node,
            "NodeID": "",
            "Revision": "tenure",
            "Server": true,
            "Version": env!("CARGO_PKG_VERSION"),
            "SessionTTLMin": min_ns,
        },
        "DebugConfig": {
            "Datacenter": DATACENTER,
            "NodeName": node,
            "SessionTTLMin": go_duration::format(min),
        },
        "Member": {
            "Name": node,
            "Status": 1,
            "Tags": { "role": "consul", "dc": DATACENTER },
        },
        "Meta": {},
    });
    Ok((StatusCode::OK, axum::Json(body)).into_response())
}

/// Every other `/v1/agent/…` path: 404, as Consul answers a path it does not serve, with what
/// tenure does not do (Patroni's `register_service` then gets `false` and carries on).
pub(super) async fn absent(call: Call) -> Answered {
    Err(ConsulError(
        StatusCode::NOT_FOUND,
        format!(
            "tenure serve does not serve /v1/agent/{}: it speaks Consul's session and KV API \
             only (no agent, no service registration, health checks or DNS); see \
             docs/guides/consul.md",
            call.path
        ),
    ))
}
