//! The one failure every endpoint answers with: a JSON object `{"error": "…"}` with a fitting
//! status. It lives apart from the handlers so that what parses requests (`params`, `auth`) can
//! fail with it without importing them.

use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

/// A failure, rendered as `{"error": message}`.
#[derive(Debug)]
pub(super) struct ApiError {
    status: StatusCode,
    message: String,
}

#[derive(Serialize)]
struct ErrorJson<'a> {
    error: &'a str,
}

impl ApiError {
    /// A failure with `status`; `message` names the bad value and what is allowed.
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    /// 400: malformed input.
    #[cfg_attr(not(feature = "http-api"), allow(dead_code))]
    pub(super) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 413: a body over [`MAX_BODY_BYTES`](super::MAX_BODY_BYTES).
    pub(super) fn too_large() -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "request body too large: at most {} bytes",
                super::MAX_BODY_BYTES
            ),
        )
    }

    /// 404: a name that has never been used.
    #[cfg_attr(not(feature = "http-api"), allow(dead_code))]
    pub(super) fn unknown(name: &str) -> ApiError {
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
            e if e.is_transient() => StatusCode::SERVICE_UNAVAILABLE,
            E::Shutdown => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, err.to_string())
    }
}

/// What a handler that can fail answers.
#[cfg_attr(not(feature = "http-api"), allow(dead_code))]
pub(super) type Answer = Result<Response, ApiError>;

/// Any other path.
pub(super) async fn no_route(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {} (see /openapi.json)", uri.path()),
    )
}
