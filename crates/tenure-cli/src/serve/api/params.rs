//! Request input, parsed strictly: a name in the path, the query parameters `index`, `wait`
//! and `limit`, and the admin bodies. Anything malformed is a 400 naming the value and what is
//! allowed; the rules here are the ones `openapi.json` states.

use crate::serve::error::ApiError;
use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use serde::Deserialize;
use std::time::Duration;

/// A validated name from the path.
pub(super) struct Name(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Name {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Name, ApiError> {
        let Path(name) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::bad_request(format!("bad name in the path: {e}")))?;
        tenure::validate::name(&name).map_err(ApiError::from)?;
        Ok(Name(name))
    }
}

/// The query parameters of a request, in order.
pub(super) struct Params(Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Params, ApiError> {
        let Query(pairs) = Query::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::bad_request(format!("bad query string: {e}")))?;
        Ok(Params(pairs))
    }
}

/// Longest `index` (u64::MAX has 20 digits).
const MAX_INDEX_DIGITS: usize = 20;

impl Params {
    /// The value of `key`, if given once; given twice is an error. Other keys are ignored.
    fn one(&self, key: &str) -> Result<Option<&str>, ApiError> {
        let mut values = self.0.iter().filter(|(k, _)| k == key).map(|(_, v)| v);
        let first = values.next();
        if values.next().is_some() {
            return Err(ApiError::bad_request(format!(
                "query parameter {key} is given more than once"
            )));
        }
        Ok(first.map(String::as_str))
    }

    /// `index=N&wait=DUR`: a blocking query if `index` is given (`wait` defaults to 5 minutes;
    /// both are capped by `max_wait`).
    pub(super) fn blocking(&self, max_wait: Duration) -> Result<Option<(u64, Duration)>, ApiError> {
        let wait = match self.one("wait")? {
            Some(text) => duration(text)?,
            None => Duration::from_secs(300),
        };
        let Some(text) = self.one("index")? else {
            return Ok(None);
        };
        let index = (text.len() <= MAX_INDEX_DIGITS && text.bytes().all(|b| b.is_ascii_digit()))
            .then(|| text.parse::<u64>().ok())
            .flatten()
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "bad index {text:?}: expected an integer from 0 to {}",
                    u64::MAX
                ))
            })?;
        Ok(Some((index, wait.min(max_wait))))
    }

    /// `limit=N`, 1 to 1000, default 20.
    pub(super) fn limit(&self) -> Result<u32, ApiError> {
        self.limit_or(20)
    }

    /// `limit` (1 to 1000), `default` without it.
    pub(super) fn limit_or(&self, default: u32) -> Result<u32, ApiError> {
        let Some(text) = self.one("limit")? else {
            return Ok(default);
        };
        text.parse::<u32>()
            .ok()
            .filter(|n| (1..=1000).contains(n) && text.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "bad limit {text:?}: expected an integer from 1 to 1000"
                ))
            })
    }
}

/// `500ms`, `30s`, `5m`: digits (at most 9) and one unit.
fn duration(text: &str) -> Result<Duration, ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "bad wait {text:?}: expected digits and a unit, ms, s or m (e.g. 500ms, 30s, 5m)"
        ))
    };
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() || digits.len() > 9 {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(bad()),
    }
}

/// `POST /v1/demote/{name}`: `{"immediate": false}`; the body may be empty.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DemoteBody {
    #[serde(default)]
    pub immediate: bool,
}

/// `POST /v1/handover/{name}`: `{"to": "candidate", "immediate": false}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HandoverBody {
    pub to: String,
    #[serde(default)]
    pub immediate: bool,
    /// `to` is a process not yet started: hand over although it is not a live candidate.
    #[serde(default)]
    pub unregistered: bool,
}

/// `POST /v1/pause/{name}` and `/v1/resume/{name}`: an empty body or `{}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EmptyBody {}

/// Parses an admin body; an empty body is `default` if there is one.
pub(super) fn body<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    default: Option<T>,
) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return default.ok_or_else(|| ApiError::bad_request("this call needs a JSON body"));
    }
    let bad = |e: serde_json::Error| ApiError::bad_request(format!("bad JSON body: {e}"));
    // Only an object: serde would also take a struct from an array of its fields.
    match serde_json::from_slice(bytes).map_err(bad)? {
        object @ serde_json::Value::Object(_) => serde_json::from_value(object).map_err(bad),
        _ => Err(ApiError::bad_request(
            "bad JSON body: expected a JSON object",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        Params(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn waits() {
        assert_eq!(duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(duration("5m").unwrap(), Duration::from_secs(300));
        for bad in [
            "",
            "s",
            "30",
            "30 s",
            "-1s",
            "1h",
            "1.5s",
            "1234567890s",
            "３s",
        ] {
            assert!(duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn blocking_queries() {
        let max = Duration::from_secs(600);
        assert_eq!(params(&[]).blocking(max).unwrap(), None);
        assert_eq!(params(&[("wait", "1s")]).blocking(max).unwrap(), None);
        assert_eq!(
            params(&[("index", "7")]).blocking(max).unwrap(),
            Some((7, Duration::from_secs(300)))
        );
        assert_eq!(
            params(&[("index", "7"), ("wait", "20m")])
                .blocking(max)
                .unwrap(),
            Some((7, max))
        );
        assert_eq!(
            params(&[("index", "18446744073709551615")])
                .blocking(max)
                .unwrap()
                .map(|b| b.0),
            Some(u64::MAX)
        );
        for bad in ["", "-1", "+1", "1e3", "18446744073709551616", "x"] {
            assert!(params(&[("index", bad)]).blocking(max).is_err(), "{bad:?}");
        }
        assert!(params(&[("index", "1"), ("index", "2")])
            .blocking(max)
            .is_err());
        assert!(params(&[("index", "1"), ("wait", "soon")])
            .blocking(max)
            .is_err());
    }

    #[test]
    fn limits() {
        assert_eq!(params(&[]).limit().unwrap(), 20);
        assert_eq!(params(&[("limit", "1000")]).limit().unwrap(), 1000);
        for bad in ["0", "1001", "+5", "five", ""] {
            assert!(params(&[("limit", bad)]).limit().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bodies() {
        assert!(
            !body::<DemoteBody>(b"", Some(DemoteBody::default()))
                .unwrap()
                .immediate
        );
        assert!(
            body::<DemoteBody>(br#"{"immediate":true}"#, None)
                .unwrap()
                .immediate
        );
        assert!(body::<DemoteBody>(br#"{"immediate":"yes"}"#, None).is_err());
        assert!(body::<DemoteBody>(br#"{"now":true}"#, None).is_err());
        assert!(body::<HandoverBody>(b"", None).is_err());
        assert_eq!(
            body::<HandoverBody>(br#"{"to":"b"}"#, None).unwrap().to,
            "b"
        );
        assert!(body::<EmptyBody>(b"[]", Some(EmptyBody {})).is_err());
        assert!(body::<EmptyBody>(b"{}", None).is_ok());
        assert!(body::<DemoteBody>(b"[true]", None).is_err());
        assert!(body::<DemoteBody>(b"{", None).is_err());
    }
}
