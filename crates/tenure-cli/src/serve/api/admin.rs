//! The admin calls: demote, handover, pause and resume, each behind the bearer token
//! ([`require`]) and recorded in the history with the requester as actor.

use super::params::{body, DemoteBody, EmptyBody, HandoverBody, Name};
use crate::output::AdminAnswer;
use crate::serve::auth::{bearer, Actor};
use crate::serve::error::{Answer, ApiError};
use crate::serve::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use tenure::candidates::{Candidates, Handover};
use tenure::Applied;

fn admin_answer(action: &'static str, applied: &Applied) -> Response {
    Json(AdminAnswer::new(action, applied)).into_response()
}

fn admin_body(bytes: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    bytes.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large(),
        status => ApiError::new(status, e.body_text()),
    })
}

/// `POST /v1/demote/{name}` `{"immediate": bool}`: force a re-election.
pub(super) async fn demote(
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

/// `POST /v1/handover/{name}` `{"to": candidate, "immediate": bool, "unregistered": bool}`:
/// to a live candidate only (400 otherwise), unless `unregistered`; its tenure stands against
/// priorities.
pub(super) async fn handover(
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
    let how = Handover {
        immediate: request.immediate,
        unregistered: request.unregistered,
    };
    let applied = Candidates::new(state.0.store.clone())
        .handover(&name, &request.to, how, &actor)
        .await?;
    Ok(admin_answer("handover", &applied))
}

/// `POST /v1/pause/{name}`: a name never used is a 404 here (the command line can pre-pause).
pub(super) async fn pause(
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
pub(super) async fn resume(
    State(state): State<AppState>,
    Actor(actor): Actor,
    Name(name): Name,
    bytes: Result<Bytes, BytesRejection>,
) -> Answer {
    body::<EmptyBody>(&admin_body(bytes)?, Some(EmptyBody {}))?;
    let applied = state.0.store.resume(&name, &actor).await?;
    Ok(admin_answer("resume", &applied))
}

/// Lets an admin call through only with the right bearer token: 401 without one or with a
/// wrong one, 403 when the server has no token at all (admin calls are off).
pub(super) async fn require(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = &state.0.token else {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "admin calls are disabled: start tenure serve with --token-file",
        )
        .into_response();
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer(v.as_bytes()));
    match presented {
        Some(given) if token.matches(given) => next.run(request).await,
        Some(_) => unauthorized("wrong bearer token"),
        None => unauthorized("admin calls need the header Authorization: Bearer <token>"),
    }
}

fn unauthorized(message: &str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"tenure\""),
    );
    response
}
