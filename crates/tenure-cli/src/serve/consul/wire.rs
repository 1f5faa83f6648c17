//! Consul's JSON shapes of sessions and entries, and the index headers every answer carries.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{json, Map, Value};
use tenure::consul::{Entry, Session};

pub(super) fn with_index(index: u64, status: StatusCode, body: Value) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    index_headers(&mut response, index);
    response
}

pub(super) fn index_headers(response: &mut Response, index: u64) {
    let h = response.headers_mut();
    h.insert("x-consul-index", HeaderValue::from(index));
    h.insert("x-consul-knownleader", HeaderValue::from_static("true"));
    h.insert("x-consul-lastcontact", HeaderValue::from_static("0"));
}

pub(super) fn session_json(s: &Session) -> Value {
    json!({
        "ID": s.id,
        "Name": s.name,
        "Node": s.node,
        "LockDelay": u64::try_from(s.lock_delay.as_nanos()).unwrap_or(u64::MAX),
        "Behavior": s.behavior.as_str(),
        "TTL": s.ttl.map_or(String::new(), |t| format!("{}s", t.as_secs())),
        "NodeChecks": if s.ttl.is_none() { json!(["serfHealth"]) } else { json!([]) },
        "ServiceChecks": Value::Null,
        "CreateIndex": s.create_index,
        "ModifyIndex": s.modify_index,
    })
}

pub(super) fn entry_json(e: &Entry) -> Value {
    let mut m = Map::new();
    m.insert("LockIndex".into(), json!(e.lock_index));
    m.insert("Key".into(), json!(e.key));
    m.insert("Flags".into(), json!(e.flags));
    m.insert(
        "Value".into(),
        if e.value.is_empty() {
            Value::Null
        } else {
            json!(base64::engine::general_purpose::STANDARD.encode(&e.value))
        },
    );
    if let Some(session) = &e.session {
        m.insert("Session".into(), json!(session));
    }
    m.insert("CreateIndex".into(), json!(e.create_index));
    m.insert("ModifyIndex".into(), json!(e.modify_index));
    Value::Object(m)
}
