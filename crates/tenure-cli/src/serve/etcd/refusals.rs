//! What the gRPC layer itself refuses, before a request reaches a service, answered as etcd
//! (grpc-go) answers it rather than in tonic's words: clients map some of them back by code
//! and text (the Go client retries `ResourceExhausted` differently from `OutOfRange`).
//!
//! | refusal | tonic | etcd (grpc-go) |
//! |---|---|---|
//! | a message over the limit | `OUT_OF_RANGE` "Error, decoded message length too large: found N bytes, the limit is: M bytes" | `RESOURCE_EXHAUSTED` "grpc: received message larger than max (N vs. M)" |
//! | an unknown method of a service | `UNIMPLEMENTED` "" | `UNIMPLEMENTED` "unknown method M for service S" |
//! | a message cut short | `INTERNAL` "Unexpected EOF decoding stream." | `UNKNOWN` "unexpected EOF" |
//! | a compressed message without an encoding | `INTERNAL` "protocol error: …" | `INTERNAL` "grpc: compressed flag set with identity or empty encoding" |
//! | an undecodable message | `INTERNAL` "failed to decode Protobuf message: …" | `INTERNAL` "grpc: error unmarshalling request: …" (the rest is each protobuf library's own text) |
//!
//! They all come as an answer without messages, the status in its headers, which is where
//! this middleware rewrites them.

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tonic::{Code, Status};

/// Rewrites tonic's refusals of a call as grpc-go words them (see the module's docs).
pub(super) async fn in_grpc_go_words(request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    let mut response = next.run(request).await;
    let Some(status) = Status::from_header_map(response.headers()) else {
        return response;
    };
    if let Some((code, message)) = reworded(&status, &path) {
        let headers = response.headers_mut();
        headers.insert("grpc-status", HeaderValue::from(code as i32));
        if let Ok(message) = HeaderValue::from_str(&percent_encoded(&message)) {
            headers.insert("grpc-message", message);
        }
    }
    response
}

/// grpc-go's code and text for one of tonic's refusals of a call to `path`, if it is one.
fn reworded(status: &Status, path: &str) -> Option<(Code, String)> {
    let message = status.message();
    match status.code() {
        Code::OutOfRange => {
            let rest = message.strip_prefix("Error, decoded message length too large: found ")?;
            let (found, rest) = rest.split_once(" bytes, the limit is: ")?;
            let limit = rest.strip_suffix(" bytes")?;
            Some((
                Code::ResourceExhausted,
                format!("grpc: received message larger than max ({found} vs. {limit})"),
            ))
        }
        Code::Unimplemented if message.is_empty() => {
            let (service, method) = path.trim_start_matches('/').split_once('/')?;
            Some((
                Code::Unimplemented,
                format!("unknown method {method} for service {service}"),
            ))
        }
        Code::Internal if message == "Unexpected EOF decoding stream." => {
            Some((Code::Unknown, "unexpected EOF".into()))
        }
        Code::Internal if message.contains("compressed-flag but no grpc-encoding") => Some((
            Code::Internal,
            "grpc: compressed flag set with identity or empty encoding".into(),
        )),
        Code::Internal => {
            let detail = message.strip_prefix("failed to decode Protobuf message: ")?;
            Some((
                Code::Internal,
                format!("grpc: error unmarshalling request: {detail}"),
            ))
        }
        _ => None,
    }
}

/// gRPC's `grpc-message` encoding: bytes outside printable ASCII, and `%`, percent-encoded.
fn percent_encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..0x7f).contains(&byte) && byte != b'%' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tonics_refusals_read_as_grpc_gos() {
        let too_large = Status::out_of_range(
            "Error, decoded message length too large: found 2252810 bytes, the limit is: 2097152 bytes",
        );
        assert_eq!(
            reworded(&too_large, "/etcdserverpb.KV/Put"),
            Some((
                Code::ResourceExhausted,
                "grpc: received message larger than max (2252810 vs. 2097152)".into()
            ))
        );
        assert_eq!(
            reworded(&Status::unimplemented(""), "/etcdserverpb.KV/Nope"),
            Some((
                Code::Unimplemented,
                "unknown method Nope for service etcdserverpb.KV".into()
            ))
        );
        assert_eq!(
            reworded(&Status::internal("Unexpected EOF decoding stream."), "/x/y"),
            Some((Code::Unknown, "unexpected EOF".into()))
        );
        let service_says =
            Status::out_of_range("etcdserver: mvcc: required revision is a future revision");
        assert_eq!(reworded(&service_says, "/etcdserverpb.KV/Range"), None);
        assert_eq!(
            reworded(
                &Status::unimplemented("method Hash not implemented"),
                "/a/b"
            ),
            None
        );
    }

    #[test]
    fn messages_are_percent_encoded_as_grpc_wants() {
        assert_eq!(percent_encoded("a (1 vs. 2)"), "a (1 vs. 2)");
        assert_eq!(percent_encoded("100%\n"), "100%25%0A");
    }
}
