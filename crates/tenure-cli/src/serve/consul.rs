//! Consul's HTTP API for leader election, locks and semaphores — `/v1/session/*` and
//! `/v1/kv/*` with Consul's shapes, status codes, headers and plain-text errors — on
//! `tenure::consul`. Writes need the token (`X-Consul-Token`, `?token=` or a bearer token)
//! when the server has one; reads only with `--consul-reads-need-token`.

use super::auth::Actor;
use super::AppState;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{json, Map, Value};
use std::time::Duration;
use tenure::consul::{
    new_session_id, Answer, Behavior, Entry, Error, PutMode, Reply, Request, Session, SessionSpec,
    DEFAULT_LOCK_DELAY, MAX_VALUE_BYTES,
};

/// Query parameters, as Consul reads them: flags may come without a value (`?recurse`).
type Params = Query<Vec<(String, String)>>;

/// A blocking query's default wait (Consul's).
const DEFAULT_WAIT: Duration = Duration::from_secs(300);

/// A Consul-style failure: a status and a plain-text message.
pub(super) struct ConsulError(StatusCode, String);

impl IntoResponse for ConsulError {
    fn into_response(self) -> Response {
        (
            self.0,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            self.1,
        )
            .into_response()
    }
}

fn bad(message: impl Into<String>) -> ConsulError {
    ConsulError(StatusCode::BAD_REQUEST, message.into())
}

impl From<Error> for ConsulError {
    fn from(e: Error) -> ConsulError {
        let status = match &e {
            Error::Store(tenure::Error::Invalid { .. }) => StatusCode::BAD_REQUEST,
            // As Consul: an unknown session or node is a server error (500).
            Error::InvalidSession(_) | Error::UnknownNode(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Error::Store(store) if store.is_transient() => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ConsulError(status, e.to_string())
    }
}

type Answered = Result<Response, ConsulError>;

fn param<'a>(params: &'a Params, name: &str) -> Option<&'a str> {
    params
        .0
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// A flag such as `?recurse`: on when present, whatever its value (as Consul reads it).
fn flag(params: &Params, name: &str) -> bool {
    param(params, name).is_some()
}

fn number(params: &Params, name: &str) -> Result<Option<u64>, ConsulError> {
    param(params, name)
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                bad(format!(
                    "Invalid {name} index {v:?}: expected an unsigned integer"
                ))
            })
        })
        .transpose()
}

/// A duration in Go's syntax ("15s", "1m30s", "500ms"), as Consul reads it.
fn go_duration(what: &str, text: &str) -> Result<Duration, ConsulError> {
    super::go_duration::parse(text).ok_or_else(|| {
        bad(format!(
            "Invalid {what} {text:?}: expected a duration such as 15s"
        ))
    })
}

/// Lets a write (or, if configured, a read) through only with the server's token.
fn authorize(
    state: &AppState,
    headers: &HeaderMap,
    params: &Params,
    write: bool,
) -> Result<(), ConsulError> {
    let Some(token) = &state.0.token else {
        return Ok(());
    };
    if !write && !state.0.consul.reads_need_token {
        return Ok(());
    }
    let given = headers
        .get("x-consul-token")
        .map(HeaderValue::as_bytes)
        .or_else(|| {
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        })
        .or_else(|| param(params, "token").map(str::as_bytes));
    match given {
        Some(given) if token.matches(given) => Ok(()),
        _ => Err(ConsulError(
            StatusCode::FORBIDDEN,
            "Permission denied: this tenure serve needs its token (X-Consul-Token)".into(),
        )),
    }
}

/// Consul's blocking query: with `?index=N` (N > 0), wait until the store-wide index passes
/// N or `?wait` (default 5 min, at most the server's `--max-wait`) passes, plus up to a
/// sixteenth of it as jitter. A malformed `wait` is refused even without `index`, an empty
/// one is ignored (as Consul does).
async fn block(state: &AppState, params: &Params) -> Result<(), ConsulError> {
    let wait = match param(params, "wait").filter(|w| !w.is_empty()) {
        Some(w) => go_duration("wait", w)?,
        None => DEFAULT_WAIT,
    }
    .min(state.0.max_wait);
    let Some(index) = number(params, "index")?.filter(|i| *i > 0) else {
        return Ok(());
    };
    let jitter = wait / 16;
    let jitter = Duration::from_millis(rand_below(
        u64::try_from(jitter.as_millis()).unwrap_or(u64::MAX - 1) + 1,
    ));
    state.0.consul.wait_past(index, wait + jitter).await;
    Ok(())
}

fn rand_below(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    nanos % n.max(1)
}

async fn run(state: &AppState, request: Request, actor: &str) -> Result<Answer, ConsulError> {
    let answer = state.0.consul.request(&request, actor).await?;
    state.0.consul.saw(answer.index);
    Ok(answer)
}

fn with_index(index: u64, status: StatusCode, body: Value) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    index_headers(&mut response, index);
    response
}

fn index_headers(response: &mut Response, index: u64) {
    let h = response.headers_mut();
    h.insert("x-consul-index", HeaderValue::from(index));
    h.insert("x-consul-knownleader", HeaderValue::from_static("true"));
    h.insert("x-consul-lastcontact", HeaderValue::from_static("0"));
}

fn session_json(s: &Session) -> Value {
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

fn entry_json(e: &Entry) -> Value {
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

// === sessions ===

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
    let ttl = match text("TTL")?.filter(|t| !t.is_empty()) {
        Some(t) => {
            let ttl = go_duration("Session TTL", &t)?;
            // As in Consul, a TTL of 0 is no TTL.
            if ttl.is_zero() {
                None
            } else if !(tenure::consul::MIN_SESSION_TTL..=tenure::consul::MAX_SESSION_TTL)
                .contains(&ttl)
            {
                return Err(bad(format!(
                    "Invalid Session TTL '{}', must be between [10s=24h0m0s]",
                    t
                )));
            } else {
                Some(ttl)
            }
        }
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

pub(super) async fn create_session(
    State(state): State<AppState>,
    Actor(actor): Actor,
    headers: HeaderMap,
    params: Params,
    body: Bytes,
) -> Answered {
    authorize(&state, &headers, &params, true)?;
    let spec = spec_from(&state, &body)?;
    let request = Request::CreateSession {
        id: new_session_id(),
        spec,
        node_lease: state.0.consul.lease,
    };
    let answer = run(&state, request, &actor).await?;
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

pub(super) async fn renew_session(
    State(state): State<AppState>,
    Actor(actor): Actor,
    Path(id): Path<String>,
    headers: HeaderMap,
    params: Params,
) -> Answered {
    authorize(&state, &headers, &params, true)?;
    let answer = run(&state, Request::RenewSession(id.clone()), &actor).await?;
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

pub(super) async fn destroy_session(
    State(state): State<AppState>,
    Actor(actor): Actor,
    Path(id): Path<String>,
    headers: HeaderMap,
    params: Params,
) -> Answered {
    authorize(&state, &headers, &params, true)?;
    let answer = run(&state, Request::DestroySession(id), &actor).await?;
    Ok(with_index(
        answer.index,
        StatusCode::OK,
        json!(answer.reply == Reply::Done(true)),
    ))
}

pub(super) async fn session_info(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    params: Params,
) -> Answered {
    authorize(&state, &headers, &params, false)?;
    block(&state, &params).await?;
    let answer = run(&state, Request::Session(id), "").await?;
    let list: Vec<Value> = match &answer.reply {
        Reply::Session(Some(s)) => vec![session_json(s)],
        _ => vec![],
    };
    Ok(with_index(answer.index, StatusCode::OK, json!(list)))
}

pub(super) async fn session_list(
    State(state): State<AppState>,
    headers: HeaderMap,
    params: Params,
) -> Answered {
    sessions(&state, &headers, &params, None).await
}

pub(super) async fn session_node(
    State(state): State<AppState>,
    Path(node): Path<String>,
    headers: HeaderMap,
    params: Params,
) -> Answered {
    sessions(&state, &headers, &params, Some(node)).await
}

async fn sessions(
    state: &AppState,
    headers: &HeaderMap,
    params: &Params,
    node: Option<String>,
) -> Answered {
    authorize(state, headers, params, false)?;
    block(state, params).await?;
    let answer = run(state, Request::Sessions(node), "").await?;
    let Reply::Sessions(list) = &answer.reply else {
        return Err(ConsulError(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no sessions".into(),
        ));
    };
    let list: Vec<Value> = list.iter().map(session_json).collect();
    Ok(with_index(answer.index, StatusCode::OK, json!(list)))
}

// === KV ===

fn reject_unknown_key(key: &str) -> Result<(), ConsulError> {
    if key.contains('\0') {
        return Err(bad(format!("Invalid key {key:?}: no NUL bytes")));
    }
    Ok(())
}

pub(super) async fn kv_get_root(
    state: State<AppState>,
    headers: HeaderMap,
    params: Params,
) -> Answered {
    kv_get(state, Path(String::new()), headers, params).await
}

pub(super) async fn kv_get(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
    params: Params,
) -> Answered {
    authorize(&state, &headers, &params, false)?;
    reject_unknown_key(&key)?;
    let keys = flag(&params, "keys");
    let recurse = flag(&params, "recurse") || keys;
    if !recurse && key.is_empty() {
        return Err(bad("Missing key name"));
    }
    block(&state, &params).await?;
    let answer = run(
        &state,
        Request::Get {
            key: key.clone(),
            recurse,
        },
        "",
    )
    .await?;
    let Reply::Entries(entries) = &answer.reply else {
        return Err(ConsulError(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no entries".into(),
        ));
    };
    if entries.is_empty() {
        let mut response = StatusCode::NOT_FOUND.into_response();
        index_headers(&mut response, answer.index);
        return Ok(response);
    }
    if keys {
        let separator = param(&params, "separator").filter(|s| !s.is_empty());
        let mut listed: Vec<String> = Vec::new();
        for e in entries {
            let shown = match separator {
                Some(sep) => match e.key[key.len()..].find(sep) {
                    Some(at) => e.key[..key.len() + at + sep.len()].to_string(),
                    None => e.key.clone(),
                },
                None => e.key.clone(),
            };
            if listed.last() != Some(&shown) {
                listed.push(shown);
            }
        }
        return Ok(with_index(answer.index, StatusCode::OK, json!(listed)));
    }
    if flag(&params, "raw") && !recurse {
        let mut response = (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/octet-stream")],
            entries[0].value.clone(),
        )
            .into_response();
        index_headers(&mut response, answer.index);
        return Ok(response);
    }
    let list: Vec<Value> = entries.iter().map(entry_json).collect();
    Ok(with_index(answer.index, StatusCode::OK, json!(list)))
}

pub(super) async fn kv_put(
    State(state): State<AppState>,
    Actor(actor): Actor,
    Path(key): Path<String>,
    headers: HeaderMap,
    params: Params,
    body: Bytes,
) -> Answered {
    authorize(&state, &headers, &params, true)?;
    reject_unknown_key(&key)?;
    if body.len() > MAX_VALUE_BYTES {
        return Err(too_large(body.len()));
    }
    let flags = number(&params, "flags")?.unwrap_or(0);
    let mode = match (
        param(&params, "acquire"),
        param(&params, "release"),
        number(&params, "cas")?,
    ) {
        (Some(_), Some(_), _) => return Err(bad("Conflicting flags: acquire and release")),
        (Some(s), None, _) => PutMode::Acquire(s.to_string()),
        (None, Some(s), _) => PutMode::Release(s.to_string()),
        (None, None, cas) => PutMode::Set { cas },
    };
    let request = Request::Put {
        key,
        value: body.to_vec(),
        flags,
        mode,
    };
    let answer = run(&state, request, &actor).await?;
    let mut response = with_index(
        answer.index,
        StatusCode::OK,
        json!(answer.reply == Reply::Done(true)),
    );
    if let Reply::Refused(reason) = &answer.reply {
        // Consul answers `false` alone to an acquire it cannot grant (a lock-delay: it logs
        // why); tenure's reason rides in a header of its own, which Consul's clients ignore.
        let shown: String = reason
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        if let Ok(value) = HeaderValue::from_str(&shown) {
            response.headers_mut().insert("x-tenure-refused", value);
        }
    }
    Ok(response)
}

pub(super) async fn kv_delete_root(
    state: State<AppState>,
    actor: Actor,
    headers: HeaderMap,
    params: Params,
) -> Answered {
    kv_delete(state, actor, Path(String::new()), headers, params).await
}

pub(super) async fn kv_delete(
    State(state): State<AppState>,
    Actor(actor): Actor,
    Path(key): Path<String>,
    headers: HeaderMap,
    params: Params,
) -> Answered {
    authorize(&state, &headers, &params, true)?;
    reject_unknown_key(&key)?;
    let recurse = flag(&params, "recurse");
    if !recurse && key.is_empty() {
        return Err(bad("Missing key name"));
    }
    let cas = number(&params, "cas")?;
    if recurse && cas.is_some() {
        return Err(bad("Conflicting flags: cas and recurse"));
    }
    let answer = run(&state, Request::Delete { key, recurse, cas }, &actor).await?;
    Ok(with_index(
        answer.index,
        StatusCode::OK,
        json!(answer.reply == Reply::Done(true)),
    ))
}

/// 413, in Consul's words.
pub(super) fn too_large(size: usize) -> ConsulError {
    ConsulError(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("Request body({size} bytes) too large, max size: {MAX_VALUE_BYTES} bytes"),
    )
}
