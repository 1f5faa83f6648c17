//! `GET /health`: whether this server reads its database, as the shared watcher last did.

use super::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

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
pub(super) async fn health(State(state): State<AppState>) -> Response {
    let view = state.0.watcher.current();
    let ok = view.error.is_none() && view.snapshot.is_some();
    let health = Health {
        status: if ok { "ok" } else { "unavailable" },
        database: state.0.store.kind().to_string(),
        index: view.index,
        waiting: state.0.watcher.waiting(),
        last_read_ms: view
            .read_at
            .map(|t| u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)),
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
