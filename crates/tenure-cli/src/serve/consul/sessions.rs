//! `/v1/session/*`: create, renew, destroy, and read sessions, as Consul answers them.

use super::wire::{session_json, with_index};
use super::{bad, go_duration, Answered, Call, ConsulError};
use crate::serve::AppState;
use axum::http::StatusCode;
use serde_json::{json, Map, Value};
use std::time::Duration;
use tenure::consul::{
    new_session_id, Behavior, Error, Reply, Request, SessionSpec, DEFAULT_LOCK_DELAY,
};

/// The fields of a session create body, whatever their case (Consul's decoder ignores it).
fn field<'a>(body: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    body.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

fn spec_from(state: &AppState, body: &[u8]) -> Result<SessionSpec, ConsulError> {
    let body: Map<String, Value> = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        serde_json::from_slice(body).map_err(|e| bad(format!("Request decode failed: {e}")))?
    };
    let text = |name: &str| -> Result<Option<String>, ConsulError> {
        match field(&body, name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(bad(format!(
                "Request decode failed: {name} must be a string, not {other}"
            ))),
        }
    };
    let node = text("Node")?
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| state.0.consul.name.clone());
    if node != state.0.consul.name {
        return Err(ConsulError(
            StatusCode::INTERNAL_SERVER_ERROR,
            Error::UnknownNode(node).to_string(),
        ));
    }
    // The range is the layer's to check (its minimum is this server's --session-ttl-min), in
    // Consul's words; a TTL that does not parse is refused as Consul's RPC refuses it (500).
    let ttl = match text("TTL")?.filter(|t| !t.is_empty()) {
        Some(t) => match tenure::consul::go_duration::parse(&t) {
            // As in Consul, a TTL of 0 is no TTL.
            Some(ttl) if ttl.is_zero() => None,
            Some(ttl) => Some(ttl),
            None => {
                // Go's words for what time.ParseDuration refuses.
                let why = if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                    "missing unit in duration"
                } else {
                    "invalid duration"
                };
                return Err(ConsulError(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("Session TTL '{t}' invalid: time: {why} {t:?}"),
                ));
            }
        },
        None => None,
    };
    let lock_delay = match field(&body, "LockDelay") {
        None | Some(Value::Null) => DEFAULT_LOCK_DELAY,
        Some(Value::String(s)) => go_duration("LockDelay", s)?,
        // A number is nanoseconds (Go's time.Duration), unless below 1000: then seconds
        // (Consul's lockDelayMinThreshold, for clients that send 15 meaning 15s).
        Some(Value::Number(n)) => match n.as_u64() {
            Some(v) if v < 1000 => Duration::from_secs(v),
            Some(v) => Duration::from_nanos(v),
            None => return Err(bad(format!("Invalid LockDelay {n}"))),
        },
        Some(other) => return Err(bad(format!("Invalid LockDelay {other}"))),
    };
    let behavior = match text("Behavior")?.filter(|b| !b.is_empty()) {
        None => Behavior::Release,
        Some(b) => Behavior::parse(&b).ok_or_else(|| {
            bad(format!(
                "Invalid Behavior setting '{b}': 'release' or 'delete'"
            ))
        })?,
    };
    for checks in ["Checks", "NodeChecks", "ServiceChecks"] {
        match field(&body, checks) {
            None | Some(Value::Null) => {}
            Some(Value::Array(list)) if list.iter().all(|c| c.as_str() == Some("serfHealth")) => {}
            Some(other) => {
                return Err(bad(format!(
                    "{checks} {other} not supported: tenure has no health checks (a session \
                     without TTL lives as long as its node, a TTL session by its TTL)"
                )))
            }
        }
    }
    Ok(SessionSpec {
        name: text("Name")?.unwrap_or_default(),
        node,
        ttl,
        lock_delay,
        behavior,
    })
}

/// `PUT /v1/session/create`.
pub(super) async fn create(call: Call) -> Answered {
    let spec = spec_from(&call.state, &call.body)?;
    let request = Request::CreateSession {
        id: new_session_id(),
        spec,
        node_lease: call.state.0.consul.lease,
    };
    let answer = call.run(request, true).await?;
    let Reply::Session(Some(session)) = answer.reply else {
        return Err(ConsulError(
            StatusCode::INTERNAL_SERVER_ERROR,
            "session not created".into(),
        ));
    };
    Ok(with_index(
        answer.index,
        StatusCode::OK,
        json!({ "ID": session.id }),
    ))
}

/// `PUT /v1/session/renew/{id}`.
pub(super) async fn renew(call: Call) -> Answered {
    let id = call.path.clone();
    let answer = call.run(Request::RenewSession(id.clone()), true).await?;
    match answer.reply {
        Reply::Session(Some(s)) => Ok(with_index(
            answer.index,
            StatusCode::OK,
            json!([session_json(&s)]),
        )),
        _ => Err(ConsulError(
            StatusCode::NOT_FOUND,
            format!("Session id '{id}' not found"),
        )),
    }
}

/// `PUT /v1/session/destroy/{id}`.
pub(super) async fn destroy(call: Call) -> Answered {
    let answer = call
        .run(Request::DestroySession(call.path.clone()), true)
        .await?;
    Ok(with_index(
        answer.index,
        StatusCode::OK,
        json!(answer.reply == Reply::Done(true)),
    ))
}

/// `GET /v1/session/info/{id}`, blocking.
pub(super) async fn info(call: Call) -> Answered {
    let answer = call.read(Request::Session(call.path.clone())).await?;
    let list: Vec<Value> = match &answer.reply {
        Reply::Session(Some(s)) => vec![session_json(s)],
        _ => vec![],
    };
    Ok(with_index(answer.index, StatusCode::OK, json!(list)))
}

/// `GET /v1/session/list`, blocking.
pub(super) async fn list(call: Call) -> Answered {
    sessions(call, None).await
}

/// `GET /v1/session/node/{node}`, blocking.
pub(super) async fn of_node(call: Call) -> Answered {
    let node = call.path.clone();
    sessions(call, Some(node)).await
}

async fn sessions(call: Call, node: Option<String>) -> Answered {
    let answer = call.read(Request::Sessions(node)).await?;
    let Reply::Sessions(list) = &answer.reply else {
        return Err(ConsulError(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no sessions".into(),
        ));
    };
    let list: Vec<Value> = list.iter().map(session_json).collect();
    Ok(with_index(answer.index, StatusCode::OK, json!(list)))
}
