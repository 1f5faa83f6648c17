//! `/v1/kv/*`: read, write (with `cas`, `acquire`, `release`) and delete keys, as Consul
//! answers them.

use super::wire::{entry_json, index_headers, with_index};
use super::{bad, too_large, Answered, Call, ConsulError};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use serde_json::{json, Value};
use tenure::consul::{PutMode, Reply, Request, MAX_VALUE_BYTES};

fn reject_unknown_key(key: &str) -> Result<(), ConsulError> {
    if key.contains('\0') {
        return Err(bad(format!("Invalid key {key:?}: no NUL bytes")));
    }
    Ok(())
}

/// `GET /v1/kv/{key}` (`recurse`, `keys` with `separator`, `raw`), blocking.
pub(super) async fn get(call: Call) -> Answered {
    let key = call.path.clone();
    reject_unknown_key(&key)?;
    let keys = call.flag("keys");
    let recurse = call.flag("recurse") || keys;
    if !recurse && key.is_empty() {
        return Err(bad("Missing key name"));
    }
    let request = Request::Get {
        key: key.clone(),
        recurse,
    };
    let answer = call.read(request).await?;
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
        let separator = call.param("separator").filter(|s| !s.is_empty());
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
    if call.flag("raw") && !recurse {
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

/// `PUT /v1/kv/{key}` (`flags`, `cas`, `acquire`, `release`): the body is the value.
pub(super) async fn put(call: Call) -> Answered {
    let key = call.path.clone();
    reject_unknown_key(&key)?;
    if call.body.len() > MAX_VALUE_BYTES {
        return Err(too_large(call.body.len()));
    }
    let flags = call.number("flags")?.unwrap_or(0);
    let mode = match (
        call.param("acquire"),
        call.param("release"),
        call.number("cas")?,
    ) {
        (Some(_), Some(_), _) => return Err(bad("Conflicting flags: acquire and release")),
        (Some(s), None, _) => PutMode::Acquire(s.to_string()),
        (None, Some(s), _) => PutMode::Release(s.to_string()),
        (None, None, cas) => PutMode::Set { cas },
    };
    let request = Request::Put {
        key,
        value: call.body.to_vec(),
        flags,
        mode,
    };
    let answer = call.run(request, true).await?;
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

/// `DELETE /v1/kv/{key}` (`recurse`, `cas`).
pub(super) async fn delete(call: Call) -> Answered {
    let key = call.path.clone();
    reject_unknown_key(&key)?;
    let recurse = call.flag("recurse");
    if !recurse && key.is_empty() {
        return Err(bad("Missing key name"));
    }
    let cas = call.number("cas")?;
    if recurse && cas.is_some() {
        return Err(bad("Conflicting flags: cas and recurse"));
    }
    let answer = call
        .run(Request::Delete { key, recurse, cas }, true)
        .await?;
    Ok(with_index(
        answer.index,
        StatusCode::OK,
        json!(answer.reply == Reply::Done(true)),
    ))
}
