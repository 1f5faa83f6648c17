//! The JSON endpoints. Reads without `index` go to the database; blocking reads (`index`,
//! `wait`) are answered from the shared watcher's view. Every failure is a JSON object
//! `{"error": "…"}` with a fitting status.

use super::auth::Actor;
use super::params::{body, DemoteBody, EmptyBody, HandoverBody, Name, Params};
use super::watch::View;
use super::AppState;
use crate::output::{time, HistoryJson, LeaderJson, LeaseJson};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use tenure::{Applied, Effect, LeaderInfo, Role, Snapshot};

/// The index of the state an answer shows, as Consul's `X-Consul-Index`.
pub const INDEX_HEADER: HeaderName = HeaderName::from_static("x-tenure-index");

/// A failure, rendered as `{"error": message}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

#[derive(Serialize)]
struct ErrorJson<'a> {
    error: &'a str,
}

impl ApiError {
    /// A failure with `status`; `message` names the bad value and what is allowed.
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    /// 400: malformed input.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 413: a body over [`MAX_BODY_BYTES`](super::MAX_BODY_BYTES).
    pub fn too_large() -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "request body too large: at most {} bytes",
                super::MAX_BODY_BYTES
            ),
        )
    }

    fn unknown(name: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no lease named {name:?} has ever been used"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorJson {
                error: &self.message,
            }),
        )
            .into_response()
    }
}

impl From<tenure::Error> for ApiError {
    fn from(err: tenure::Error) -> ApiError {
        use tenure::Error as E;
        let status = match &err {
            E::Invalid { .. } => StatusCode::BAD_REQUEST,
            E::UnknownName(_) => StatusCode::NOT_FOUND,
            E::Connect { .. } | E::Timeout(_) | E::Database(_) | E::Shutdown => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, err.to_string())
    }
}

type Answer = Result<Response, ApiError>;

/// `body` as JSON with the index header.
fn indexed(index: u64, body: impl Serialize) -> Response {
    let mut response = Json(body).into_response();
    response
        .headers_mut()
        .insert(INDEX_HEADER, HeaderValue::from(index));
    response
}

// === reads ===

#[derive(Serialize)]
struct Health {
    status: &'static str,
    database: String,
    index: u64,
    /// Requests waiting in blocking queries now.
    waiting: usize,
    /// Milliseconds since the shared watcher's last successful read.
    last_read_ms: Option<u64>,
    error: Option<String>,
}

/// `GET /health`: 200 while the shared watcher's reads succeed, 503 when the last one failed.
pub async fn health(State(state): State<AppState>) -> Response {
    let view = state.0.watcher.current();
    let ok = view.error.is_none() && view.snapshot.is_some();
    let health = Health {
        status: if ok { "ok" } else { "unavailable" },
        database: state.0.store.backend().kind().to_string(),
        index: view.index,
        waiting: state.0.watcher.waiting(),
        last_read_ms: view.read_at.map(|t| t.elapsed().as_millis() as u64),
        error: view.error.clone().or_else(|| {
            view.snapshot
                .is_none()
                .then(|| "no read of the leases yet".to_string())
        }),
    };
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(health)).into_response()
}

#[derive(Serialize)]
struct StatusJson {
    /// The database instant of the read.
    now: String,
    index: u64,
    leases: Vec<LeaseJson>,
}

fn status_json(snapshot: &Snapshot, index: u64) -> StatusJson {
    StatusJson {
        now: time(snapshot.now),
        index,
        leases: snapshot
            .leases
            .iter()
            .map(|l| LeaseJson::new(l, snapshot.now))
            .collect(),
    }
}

/// An answer from the watcher's view: 503 if its last read failed.
fn fresh(view: &View) -> Result<&Snapshot, ApiError> {
    match (&view.error, &view.snapshot) {
        (None, Some(snapshot)) => Ok(snapshot),
        (Some(e), _) => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.clone())),
        (None, None) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the leases have not been read yet",
        )),
    }
}

/// `GET /v1/status[?index=N&wait=DUR]`: every name.
pub async fn status(State(state): State<AppState>, params: Params) -> Answer {
    if let Some((index, wait)) = params.blocking(state.0.max_wait)? {
        let view = state.0.watcher.wait(index, wait, |v| Some(v.index)).await;
        let snapshot = fresh(&view)?;
        return Ok(indexed(view.index, status_json(snapshot, view.index)));
    }
    let snapshot = state.0.store.list().await?;
    let index = state.0.watcher.current().index;
    Ok(indexed(index, status_json(&snapshot, index)))
}

#[derive(Serialize)]
struct LeaseAnswer {
    /// The database instant of the read.
    now: String,
    index: u64,
    lease: LeaseJson,
}

/// `GET /v1/status/{name}[?index=N&wait=DUR]`: one name.
pub async fn lease(State(state): State<AppState>, Name(name): Name, params: Params) -> Answer {
    let watcher = &state.0.watcher;
    if let Some((index, wait)) = params.blocking(state.0.max_wait)? {
        let view = watcher
            .wait(index, wait, |v| v.modified.get(&name).copied())
            .await;
        let snapshot = fresh(&view)?;
        // A name too new for the view is read below.
        if let (Some(lease), Some(&at)) = (view.lease(&name), view.modified.get(&name)) {
            let answer = LeaseAnswer {
                now: time(snapshot.now),
                index: at,
                lease: LeaseJson::new(lease, snapshot.now),
            };
            return Ok(indexed(at, answer));
        }
    }
    let snapshot = state.0.store.get(&name).await?;
    let lease = snapshot
        .leases
        .first()
        .ok_or_else(|| ApiError::unknown(&name))?;
    let view = watcher.current();
    let index = view.modified.get(&name).copied().unwrap_or(view.index);
    let answer = LeaseAnswer {
        now: time(snapshot.now),
        index,
        lease: LeaseJson::new(lease, snapshot.now),
    };
    Ok(indexed(index, answer))
}

#[derive(Serialize)]
struct LeaderAnswer {
    name: String,
    /// Null when nobody leads now.
    leader: Option<LeaderJson>,
}

/// `GET /v1/leader/{name}`: who leads, as `tenure leader --json`.
pub async fn leader(State(state): State<AppState>, Name(name): Name) -> Answer {
    let snapshot = state.0.store.get(&name).await?;
    let lease = snapshot
        .leases
        .first()
        .ok_or_else(|| ApiError::unknown(&name))?;
    let leader = LeaderInfo::from_lease(lease, snapshot.now);
    Ok(Json(LeaderAnswer {
        name,
        leader: leader.as_ref().map(LeaderJson::from),
    })
    .into_response())
}

#[derive(Serialize)]
struct HistoryAnswer {
    name: String,
    events: Vec<HistoryJson>,
}

/// `GET /v1/history/{name}[?limit=N]`: transitions, newest first, as `tenure history --json`.
pub async fn history(State(state): State<AppState>, Name(name): Name, params: Params) -> Answer {
    let limit = params.limit()?;
    let store = &state.0.store;
    let events = store.history(&name, limit).await?;
    if events.is_empty() && store.get(&name).await?.leases.is_empty() {
        return Err(ApiError::unknown(&name));
    }
    Ok(Json(HistoryAnswer {
        name,
        events: events.iter().map(HistoryJson::from).collect(),
    })
    .into_response())
}

// === this process's own campaigns ===

#[derive(Serialize)]
struct CampaignJson {
    name: String,
    candidate: String,
    /// `leader`, `follower`, `unknown` (not yet known, or the database is unreachable),
    /// `paused` or `stopped`.
    role: &'static str,
    /// The fencing token, while this process leads.
    term: Option<u64>,
    /// How long this process still believes it leads without another renewal (its local
    /// deadline), while it leads.
    believed_ms: Option<u64>,
    /// Who leads, as last seen by a follower.
    leader: Option<LeaderJson>,
}

impl CampaignJson {
    fn new(name: &str, campaign: &super::Campaign) -> CampaignJson {
        let role = campaign.role.borrow().clone();
        let (word, term, believed_ms, leader) = match &role {
            Role::Leader { term, deadline } => {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                ("leader", Some(*term), Some(left.as_millis() as u64), None)
            }
            Role::Follower { leader } => ("follower", None, None, leader.as_ref()),
            Role::Paused => ("paused", None, None, None),
            Role::Stopped => ("stopped", None, None, None),
            Role::Unknown => ("unknown", None, None, None),
        };
        CampaignJson {
            name: name.to_string(),
            candidate: campaign.candidate.clone(),
            role: word,
            term,
            believed_ms,
            leader: leader.map(LeaderJson::from),
        }
    }

    /// Leading now: the role says so and its local deadline has not passed.
    fn leads(&self) -> bool {
        self.role == "leader" && self.believed_ms.is_some_and(|ms| ms > 0)
    }
}

#[derive(Serialize)]
struct CampaignsAnswer {
    campaigns: Vec<CampaignJson>,
}

/// `GET /v1/self`: the role of this process for each `--campaign` name.
pub async fn campaigns(State(state): State<AppState>) -> Response {
    let campaigns = state
        .0
        .campaigns
        .iter()
        .map(|(name, c)| CampaignJson::new(name, c))
        .collect();
    Json(CampaignsAnswer { campaigns }).into_response()
}

/// `GET /v1/self/{name}`: this process's role for one name (404 if it does not campaign).
pub async fn campaign(State(state): State<AppState>, Name(name): Name) -> Answer {
    let campaign = state.0.campaigns.get(&name).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("this server does not campaign for {name:?} (see --campaign)"),
        )
    })?;
    Ok(Json(CampaignJson::new(&name, campaign)).into_response())
}

#[derive(Serialize)]
struct LeaderCheck {
    name: String,
    leader: bool,
    /// This process's candidate id, if it campaigns for the name.
    candidate: Option<String>,
    term: Option<u64>,
}

/// `GET /v1/leader-check/{name}`: 200 only while this process leads `name` through its own
/// `--campaign`; 503 otherwise (also when it does not campaign for it).
pub async fn leader_check(State(state): State<AppState>, Name(name): Name) -> Response {
    let mine = state
        .0
        .campaigns
        .get(&name)
        .map(|c| CampaignJson::new(&name, c));
    let leads = mine.as_ref().is_some_and(CampaignJson::leads);
    let check = LeaderCheck {
        name,
        leader: leads,
        candidate: mine.as_ref().map(|c| c.candidate.clone()),
        term: mine.as_ref().and_then(|c| c.term).filter(|_| leads),
    };
    let status = if leads {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(check)).into_response()
}

// === admin ===

#[derive(Serialize)]
struct AdminAnswer {
    action: &'static str,
    changed: bool,
    effect: String,
    lease: Option<LeaseJson>,
}

fn admin_answer(action: &'static str, applied: &Applied) -> Response {
    Json(AdminAnswer {
        action,
        changed: applied.effect != Effect::NoChange,
        effect: applied.effect.as_str().to_string(),
        lease: applied
            .lease
            .as_ref()
            .map(|l| LeaseJson::new(l, applied.now)),
    })
    .into_response()
}

fn admin_body(bytes: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    bytes.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large(),
        status => ApiError::new(status, e.body_text()),
    })
}

/// `POST /v1/demote/{name}` `{"immediate": bool}`: force a re-election.
pub async fn demote(
    State(state): State<AppState>,
    Actor(actor): Actor,
    Name(name): Name,
    bytes: Result<Bytes, BytesRejection>,
) -> Answer {
    let request: DemoteBody = body(&admin_body(bytes)?, Some(DemoteBody::default()))?;
    if request.immediate {
        tracing::warn!(%name, %actor, "immediate demote: unsafe unless the leader's writes are fenced");
    }
    let applied = state
        .0
        .store
        .demote(&name, request.immediate, &actor)
        .await?;
    Ok(admin_answer("demote", &applied))
}

/// `POST /v1/handover/{name}` `{"to": candidate, "immediate": bool}`.
pub async fn handover(
    State(state): State<AppState>,
    Actor(actor): Actor,
    Name(name): Name,
    bytes: Result<Bytes, BytesRejection>,
) -> Answer {
    let request: HandoverBody = body(&admin_body(bytes)?, None)?;
    tenure::validate::candidate(&request.to)?;
    if request.immediate {
        tracing::warn!(%name, %actor, to = %request.to, "immediate handover: unsafe unless writes are fenced");
    }
    let applied = state
        .0
        .store
        .handover(&name, &request.to, request.immediate, &actor)
        .await?;
    Ok(admin_answer("handover", &applied))
}

/// `POST /v1/pause/{name}`: a name never used is a 404 here (the command line can pre-pause).
pub async fn pause(
    State(state): State<AppState>,
    Actor(actor): Actor,
    Name(name): Name,
    bytes: Result<Bytes, BytesRejection>,
) -> Answer {
    body::<EmptyBody>(&admin_body(bytes)?, Some(EmptyBody {}))?;
    let store = &state.0.store;
    if store.get(&name).await?.leases.is_empty() {
        return Err(ApiError::unknown(&name));
    }
    let applied = store.pause(&name, &actor).await?;
    Ok(admin_answer("pause", &applied))
}

/// `POST /v1/resume/{name}`.
pub async fn resume(
    State(state): State<AppState>,
    Actor(actor): Actor,
    Name(name): Name,
    bytes: Result<Bytes, BytesRejection>,
) -> Answer {
    body::<EmptyBody>(&admin_body(bytes)?, Some(EmptyBody {}))?;
    let applied = state.0.store.resume(&name, &actor).await?;
    Ok(admin_answer("resume", &applied))
}

/// Any other path.
pub async fn no_route(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {} (see /openapi.json)", uri.path()),
    )
}
