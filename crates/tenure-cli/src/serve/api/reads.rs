//! The reads: status, one lease, its leader and its history, the candidates, the groups and the
//! renewals. Reads without `index` go
//! to the database; blocking reads (`index`, `wait`) are answered from the shared watcher's view.

use super::params::{Name, Params};
use crate::groups::GroupJson;
use crate::output::{time, HistoryJson, LeaderJson, LeaseJson};
use crate::roster::RosterJson;
use crate::serve::error::{Answer, ApiError};
use crate::serve::watch::View;
use crate::serve::AppState;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use tenure::{LeaderInfo, Snapshot};

/// The index of the state an answer shows, as Consul's `X-Consul-Index`.
pub(super) const INDEX_HEADER: HeaderName = HeaderName::from_static("x-tenure-index");

/// `body` as JSON with the index header.
fn indexed(index: u64, body: impl Serialize) -> Response {
    let mut response = Json(body).into_response();
    response
        .headers_mut()
        .insert(INDEX_HEADER, HeaderValue::from(index));
    response
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
pub(super) async fn status(State(state): State<AppState>, params: Params) -> Answer {
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
pub(super) async fn lease(
    State(state): State<AppState>,
    Name(name): Name,
    params: Params,
) -> Answer {
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
pub(super) async fn leader(State(state): State<AppState>, Name(name): Name) -> Answer {
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
pub(super) async fn history(
    State(state): State<AppState>,
    Name(name): Name,
    params: Params,
) -> Answer {
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

/// `GET /v1/candidates/{name}`: the registry of a name, best first, as `tenure candidates
/// --json` (404 for a name with neither a lease nor a candidate).
pub(super) async fn candidates(State(state): State<AppState>, Name(name): Name) -> Answer {
    let roster = RosterJson::read(&state.0.store, &name).await?;
    if roster.candidates.is_empty() && state.0.store.get(&name).await?.leases.is_empty() {
        return Err(ApiError::unknown(&name));
    }
    Ok(Json(roster).into_response())
}

#[derive(Serialize)]
struct GroupsAnswer {
    groups: Vec<GroupJson>,
}

/// `GET /v1/groups`: every spreading group with live members and its assignment (member →
/// shards, the unowned shards), as `groups` in `tenure status --json`; one transaction.
pub(super) async fn groups(State(state): State<AppState>) -> Answer {
    let groups = crate::groups::read(&state.0.store).await?;
    Ok(Json(GroupsAnswer { groups }).into_response())
}

/// `GET /v1/renewals`: every followed name's latest renewals, oldest first.
pub(super) async fn renewals(State(state): State<AppState>) -> Response {
    Json(state.0.watcher.renewals()).into_response()
}
