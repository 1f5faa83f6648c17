//! This process's own campaigns (`--campaign`): its role per name, and the leader-check that
//! load balancers ask.

use super::params::Name;
use crate::output::LeaderJson;
use crate::serve::error::{Answer, ApiError};
use crate::serve::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use tenure::Role;

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
    fn new(name: &str, campaign: &crate::serve::Campaign) -> CampaignJson {
        let role = campaign.role.borrow().clone();
        let (word, term, believed_ms, leader) = match &role {
            Role::Leader { term, deadline } => {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                (
                    "leader",
                    Some(*term),
                    Some(u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
                    None,
                )
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
pub(super) async fn campaigns(State(state): State<AppState>) -> Response {
    let campaigns = state
        .0
        .campaigns
        .iter()
        .map(|(name, c)| CampaignJson::new(name, c))
        .collect();
    Json(CampaignsAnswer { campaigns }).into_response()
}

/// `GET /v1/self/{name}`: this process's role for one name (404 if it does not campaign).
pub(super) async fn campaign(State(state): State<AppState>, Name(name): Name) -> Answer {
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
pub(super) async fn leader_check(State(state): State<AppState>, Name(name): Name) -> Response {
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
