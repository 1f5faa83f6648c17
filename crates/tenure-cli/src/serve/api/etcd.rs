//! `GET /v1/etcd`: the etcd on the database as an operator sees it (`etcd` in `tenure status
//! --json`), one read.

use super::params::Params;
use crate::etcd_view::{read, EtcdJson, LIMIT};
use crate::output::time;
use crate::serve::error::Answer;
use crate::serve::AppState;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;

#[derive(Serialize)]
struct EtcdAnswer {
    /// The database instant of the read.
    now: String,
    /// Whether the etcd was never used here (no write, no live lease).
    unused: bool,
    #[serde(flatten)]
    etcd: EtcdJson,
}

/// `GET /v1/etcd[?limit=N]`: the revision, the compaction floor, the live leases and the
/// recipes' keys, at most `limit` (default 100) of each, with counts of the rest.
pub(super) async fn overview(State(state): State<AppState>, params: Params) -> Answer {
    let limit = params.limit_or(LIMIT)?;
    let o = read(&state.0.store, limit).await?;
    Ok(Json(EtcdAnswer {
        now: time(o.now),
        unused: o.is_unused(),
        etcd: EtcdJson::from(&o),
    })
    .into_response())
}
