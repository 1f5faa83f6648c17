//! The Consul room (cargo feature `consul`): Consul's HTTP API for leader election, locks and
//! semaphores — `/v1/session/*` and `/v1/kv/*` with Consul's shapes, status codes, headers and
//! plain-text errors — on `tenure::consul`, and this instance as a Consul node.
//!
//! Every handler has one shape, `async fn(Call) -> Answered`: the [`Call`] extractor gathers
//! what a Consul request carries (the path's parameter, the query in order, the body, who
//! asks) and checks the token on the way in — writes need it (`X-Consul-Token`, `?token=` or a
//! bearer token) when the server has one, reads only with `--consul-reads-need-token`. Adding
//! an endpoint is one function and one route.
//!
//! - this file: the routes, [`Call`], [`ConsulError`], blocking queries, the parameters.
//! - `sessions`, `kv`, `agent`: the handlers; `wire`: Consul's JSON shapes and index headers.
//! - `node`: this instance as a Consul node (heartbeats, the reap, the index blocking queries
//!   wait on).
//! - `openapi.json`: this room's part of the API description.

mod agent;
mod kv;
mod node;
mod sessions;
mod wire;

pub(crate) use node::{ConsulArgs, ConsulNode};

use crate::serve::auth::{bearer, Actor};
use crate::serve::{announced_length, AppState};
use axum::body::Bytes;
use axum::extract::{
    DefaultBodyLimit, FromRequest, FromRequestParts, Query, RawPathParams, Request,
};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, put};
use axum::Router;
use std::time::Duration;
use tenure::consul::{Answer, Error, Request as ConsulRequest, MAX_VALUE_BYTES};

/// This room's part of the OpenAPI document.
pub(super) const OPENAPI: &str = include_str!("openapi.json");

/// This room's routes, with Consul's body limit (its values' 512 KiB, refused with Consul's
/// 413 before the body is read when its length is announced) and a span per request.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/session/create", put(sessions::create))
        .route("/v1/session/renew/{id}", put(sessions::renew))
        .route("/v1/session/destroy/{id}", put(sessions::destroy))
        .route("/v1/session/info/{id}", get(sessions::info))
        .route("/v1/session/list", get(sessions::list))
        .route("/v1/session/node/{node}", get(sessions::of_node))
        .route("/v1/kv/", get(kv::get).delete(kv::delete))
        .route(
            "/v1/kv/{*key}",
            get(kv::get).put(kv::put).delete(kv::delete),
        )
        .route("/v1/agent/self", get(agent::me))
        .route("/v1/agent/{*path}", any(agent::absent))
        .route_layer(middleware::from_fn(crate::watching::consul_request))
        .route_layer(middleware::from_fn(limit_body))
        .layer(DefaultBodyLimit::max(MAX_VALUE_BYTES + 1))
}

/// A body announced larger than a value may be is refused before it is read.
async fn limit_body(request: Request, next: Next) -> Response {
    match announced_length(&request).filter(|n| *n > MAX_VALUE_BYTES as u64) {
        Some(n) => too_large(usize::try_from(n).unwrap_or(usize::MAX)).into_response(),
        None => next.run(request).await,
    }
}

/// Query parameters, as Consul reads them: flags may come without a value (`?recurse`).
type Params = Vec<(String, String)>;

/// A blocking query's default wait (Consul's).
const DEFAULT_WAIT: Duration = Duration::from_secs(300);

/// One Consul request, as every handler takes it (see the module's docs).
pub(super) struct Call {
    state: AppState,
    /// Who asks, for the history (`http:<address>`).
    actor: String,
    /// The route's one path parameter (a key, a session id, a node), `""` where it has none.
    path: String,
    /// The query, in order.
    params: Params,
    body: Bytes,
}

impl FromRequest<AppState> for Call {
    type Rejection = ConsulError;

    async fn from_request(request: Request, state: &AppState) -> Result<Call, ConsulError> {
        let (mut parts, body) = request.into_parts();
        let write = parts.method != Method::GET;
        let Ok(Actor(actor)) = Actor::from_request_parts(&mut parts, state).await;
        let path = match RawPathParams::from_request_parts(&mut parts, state).await {
            Ok(raw) => raw
                .iter()
                .next()
                .map(|(_, v)| v.to_string())
                .unwrap_or_default(),
            Err(e) => return Err(bad(format!("Invalid path: {}", e.body_text()))),
        };
        let Query(params) = Query::<Params>::try_from_uri(&parts.uri)
            .map_err(|e| bad(format!("Invalid query: {}", e.body_text())))?;
        authorize(state, &parts.headers, &params, write)?;
        let body = Bytes::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(|e| match e.status() {
                StatusCode::PAYLOAD_TOO_LARGE => too_large(MAX_VALUE_BYTES + 1),
                status => ConsulError(status, e.body_text()),
            })?;
        Ok(Call {
            state: state.clone(),
            actor,
            path,
            params,
            body,
        })
    }
}

impl Call {
    fn param(&self, name: &str) -> Option<&str> {
        param(&self.params, name)
    }

    /// A flag such as `?recurse`: on when present, whatever its value (as Consul reads it).
    fn flag(&self, name: &str) -> bool {
        self.param(name).is_some()
    }

    fn number(&self, name: &str) -> Result<Option<u64>, ConsulError> {
        self.param(name)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    bad(format!(
                        "Invalid {name} index {v:?}: expected an unsigned integer"
                    ))
                })
            })
            .transpose()
    }

    /// Runs the read `request` as Consul's blocking query: with `?index=N` (N > 0), until
    /// its answer's index passes N (the key's, the prefix's, the sessions' — see
    /// `tenure::consul::Answer::index`) or `?wait` (default 5 min, at most the server's
    /// `--max-wait`) passes, plus up to a sixteenth of it as jitter, reading again each time
    /// the store's index moves; then the last answer. An index ahead of the store waits the
    /// whole wait unless the answer passes it, and 0 does not block, as in Consul. A malformed
    /// `wait` is refused even without `index`, an empty one is ignored (as Consul does).
    async fn read(&self, request: ConsulRequest) -> Result<Answer, ConsulError> {
        let state = &self.state;
        let wait = match self.param("wait").filter(|w| !w.is_empty()) {
            Some(w) => go_duration("wait", w)?,
            None => DEFAULT_WAIT,
        }
        .min(state.0.max_wait);
        let index = self.number("index")?.unwrap_or(0);
        let jitter = wait / 16;
        let jitter = Duration::from_millis(rand_below(
            u64::try_from(jitter.as_millis()).unwrap_or(u64::MAX - 1) + 1,
        ));
        let deadline = tokio::time::Instant::now() + wait + jitter;
        loop {
            let answer = self.run(request.clone(), false).await?;
            if index == 0 || answer.index > index {
                return Ok(answer);
            }
            if !state.0.consul.wait_past(answer.store_index, deadline).await {
                return Ok(answer);
            }
        }
    }

    /// Runs `request` on the Consul layer as this call's actor (reads: none).
    async fn run(&self, request: ConsulRequest, write: bool) -> Result<Answer, ConsulError> {
        let actor = if write { self.actor.as_str() } else { "" };
        let answer = self.state.0.consul.request(&request, actor).await?;
        self.state.0.consul.saw(answer.store_index);
        Ok(answer)
    }
}

/// The handlers' answer.
type Answered = Result<Response, ConsulError>;

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
            // As Consul: an unknown session or node, a TTL out of range, are server errors
            // (500; Patroni matches "Invalid Session TTL" on a 500).
            Error::InvalidSession(_) | Error::UnknownNode(_) | Error::SessionTtl { .. } => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            Error::Store(store) if store.is_transient() => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ConsulError(status, e.to_string())
    }
}

fn param<'a>(params: &'a Params, name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// A duration in Go's syntax ("15s", "1m30s", "500ms"), as Consul reads it.
fn go_duration(what: &str, text: &str) -> Result<Duration, ConsulError> {
    tenure::consul::go_duration::parse(text).ok_or_else(|| {
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
                .and_then(|v| bearer(v.as_bytes()))
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

fn rand_below(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    nanos % n.max(1)
}

/// 413, in Consul's words.
pub(super) fn too_large(size: usize) -> ConsulError {
    ConsulError(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("Request body({size} bytes) too large, max size: {MAX_VALUE_BYTES} bytes"),
    )
}
