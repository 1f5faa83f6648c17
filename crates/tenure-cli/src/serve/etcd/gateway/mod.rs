//! etcd's JSON gateway: `POST /v3/kv/range`, `/v3/watch`, `/v3/lease/keepalive` … as etcd
//! serves them (grpc-gateway 1), in front of the room's own gRPC services.
//!
//! Like etcd's, it is a proxy: the routes are the `google.api.http` annotations of etcd's
//! protocol definitions (read at start from the descriptors `tenure-etcd-proto` carries, so
//! a method the definitions annotate is a route, with nothing written per method); the JSON
//! body becomes the protobuf request; the call goes through the gRPC router in process —
//! token, limits, metrics and every answer exactly as over gRPC —; the answer comes back as
//! JSON (`json`). The `/v3beta/` paths of etcd 3.3's clients are the same routes.
//!
//! Streams as etcd's gateway has them: the request body of a client stream (`/v3/watch`,
//! `/v3/lease/keepalive`) is a sequence of JSON objects, each sent as it arrives; the first
//! must be well-formed (else the call fails at once), the end of the body ends the client's
//! side. The answer streams `{"result": …}` objects, one a line, and a failure as a last
//! `{"error": …}` object; the HTTP status is the first message's (200) or, when the call
//! fails before any, the failure's.

mod frames;
mod json;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{self, header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use frames::{Frames, Next};
use http_body_util::BodyExt;
use prost_reflect::{DescriptorPool, MessageDescriptor};
use std::sync::{Arc, OnceLock};
use tonic::{Code, Status};
use tower::ServiceExt;

/// etcd's protocol definitions, decoded once.
fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(tenure_etcd_proto::FILE_DESCRIPTOR_SET)
            .expect("the descriptors built into tenure decode")
    })
}

/// One gateway route: the gRPC method behind it and its message types.
struct Endpoint {
    /// `/etcdserverpb.KV/Range`.
    grpc_path: String,
    input: MessageDescriptor,
    output: MessageDescriptor,
    streams_in: bool,
    streams_out: bool,
    /// The largest JSON body read for a call with one request.
    max_body: usize,
}

/// Every annotated method of etcd's definitions as a `POST` route (and its `/v3beta/`
/// twin) that calls `grpc` in process. A JSON body is read up to four times
/// `max_request_bytes` (base64 and JSON's quoting make it larger than its message).
pub(super) fn routes(grpc: Router, max_request_bytes: usize) -> Router {
    let mut router = Router::new();
    for (path, endpoint) in endpoints(max_request_bytes) {
        let endpoint = Arc::new(endpoint);
        let mut paths = vec![path.clone()];
        if let Some(rest) = path.strip_prefix("/v3/") {
            paths.push(format!("/v3beta/{rest}"));
        }
        for path in paths {
            let (endpoint, grpc) = (endpoint.clone(), grpc.clone());
            router = router.route(
                &path,
                post(move |request: Request| forward(endpoint, grpc, request)),
            );
        }
    }
    router
}

/// The `POST` path of every method of etcd's definitions that has one, and its endpoint.
fn endpoints(max_request_bytes: usize) -> Vec<(String, Endpoint)> {
    let pool = pool();
    let Some(http) = pool.get_extension_by_name("google.api.http") else {
        return Vec::new();
    };
    let mut endpoints = Vec::new();
    for service in pool.services() {
        for method in service.methods() {
            let options = method.options();
            if !options.has_extension(&http) {
                continue;
            }
            let rule = options.get_extension(&http);
            let Some(path) = rule
                .as_message()
                .filter(|rule| rule.has_field_by_name("post"))
                .and_then(|rule| rule.get_field_by_name("post"))
                .and_then(|post| post.as_str().map(str::to_string))
            else {
                continue;
            };
            let endpoint = Endpoint {
                grpc_path: format!("/{}/{}", service.full_name(), method.name()),
                input: method.input(),
                output: method.output(),
                streams_in: method.is_client_streaming(),
                streams_out: method.is_server_streaming(),
                max_body: max_request_bytes.saturating_mul(4),
            };
            endpoints.push((path, endpoint));
        }
    }
    endpoints
}

/// One gateway call: the JSON request in, the gRPC call in process, the JSON answer out.
async fn forward(endpoint: Arc<Endpoint>, grpc: Router, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let messages = if endpoint.streams_in {
        match inbound_stream(&endpoint, body).await {
            Ok(messages) => messages,
            // etcd's gateway returns a stream's first decoding error as it is: code Unknown.
            Err(e) => return json::error(&Status::unknown(e)),
        }
    } else {
        match inbound_one(&endpoint, body).await {
            Ok(message) => message,
            Err(status) => return json::error(&status),
        }
    };
    let mut call = http::Request::post(endpoint.grpc_path.as_str())
        .header(header::CONTENT_TYPE, "application/grpc")
        .header(header::TE, "trailers");
    if let Some(token) = parts.headers.get(header::AUTHORIZATION) {
        call = call.header("authorization", token);
    }
    let call = match call.body(messages) {
        Ok(call) => call,
        Err(e) => return json::error(&Status::internal(e.to_string())),
    };
    let Ok(answer) = grpc.oneshot(call).await;
    let (parts, body) = answer.into_parts();
    let early = Status::from_header_map(&parts.headers);
    let frames = Frames::new(body, early);
    if endpoint.streams_out {
        outbound_stream(endpoint, frames).await
    } else {
        outbound_one(&endpoint, frames).await
    }
}

/// The one request of a call: the body's first JSON value, as protobuf, framed.
async fn inbound_one(endpoint: &Endpoint, body: Body) -> Result<Body, Status> {
    let bytes = axum::body::to_bytes(body, endpoint.max_body)
        .await
        .map_err(|e| {
            Status::resource_exhausted(format!(
                "request body larger than {} bytes: {e}",
                endpoint.max_body
            ))
        })?;
    let value = json::first_value(&bytes).map_err(Status::invalid_argument)?;
    let message = json::to_protobuf(&endpoint.input, &value).map_err(Status::invalid_argument)?;
    Ok(Body::from(frames::frame(&message)))
}

/// The requests of a client stream: the body's JSON objects, each framed as it arrives. The
/// first is read before the call starts, so that a malformed one fails the call.
async fn inbound_stream(endpoint: &Endpoint, body: Body) -> Result<Body, String> {
    let mut objects = Objects::new(body, endpoint.input.clone(), endpoint.max_body);
    let first = objects.next().await.transpose()?;
    let stream =
        futures_util::stream::unfold((first, objects), |(first, mut objects)| async move {
            if let Some(first) = first {
                return Some((Ok::<Bytes, std::io::Error>(first), (None, objects)));
            }
            // A later malformed object ends the client's side, as in etcd's gateway.
            match objects.next().await {
                Some(Ok(message)) => Some((Ok(message), (None, objects))),
                _ => None,
            }
        });
    Ok(Body::from_stream(stream))
}

/// The successive JSON objects of a request body, as framed protobuf messages.
struct Objects {
    body: Body,
    buffer: Vec<u8>,
    input: MessageDescriptor,
    /// The longest object read.
    max: usize,
    ended: bool,
}

impl Objects {
    fn new(body: Body, input: MessageDescriptor, max: usize) -> Objects {
        Objects {
            body,
            buffer: Vec::new(),
            input,
            max,
            ended: false,
        }
    }

    /// The next object, framed; `None` at the end of the body.
    async fn next(&mut self) -> Option<Result<Bytes, String>> {
        loop {
            let mut values =
                serde_json::Deserializer::from_slice(&self.buffer).into_iter::<serde_json::Value>();
            match values.next() {
                Some(Ok(value)) => {
                    let used = values.byte_offset();
                    self.buffer.drain(..used);
                    return Some(json::to_protobuf(&self.input, &value).map(|m| frames::frame(&m)));
                }
                Some(Err(e)) if !e.is_eof() => return Some(Err(e.to_string())),
                Some(Err(e)) if self.ended => return Some(Err(e.to_string())),
                None if self.ended => return None,
                _ if self.buffer.len() > self.max => {
                    return Some(Err(format!("a request larger than {} bytes", self.max)))
                }
                _ => {}
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                Some(Err(_)) | None => self.ended = true,
            }
        }
    }
}

/// The answer of a call with one: its message as JSON, or its failure.
async fn outbound_one(endpoint: &Endpoint, mut frames: Frames) -> Response {
    let mut message = None;
    loop {
        match frames.next().await {
            Some(Next::Message(m)) => message = message.or(Some(m)),
            Some(Next::End(status)) if status.code() != Code::Ok => return json::error(&status),
            Some(Next::End(_)) | None => break,
        }
    }
    let Some(message) = message else {
        return json::error(&Status::internal("the call answered nothing"));
    };
    match json::from_protobuf(&endpoint.output, message) {
        Ok(json) => json::raw_answer(StatusCode::OK, json),
        Err(status) => json::error(&status),
    }
}

/// The answers of a stream, one JSON object a line, the HTTP status decided by the first.
async fn outbound_stream(endpoint: Arc<Endpoint>, mut frames: Frames) -> Response {
    let (status, first) = match frames.next().await {
        Some(Next::Message(m)) => (StatusCode::OK, Some(Next::Message(m))),
        Some(Next::End(s)) if s.code() != Code::Ok => {
            (json::http_status(s.code()), Some(Next::End(s)))
        }
        _ => (StatusCode::OK, None),
    };
    let chunks = futures_util::stream::unfold(
        (first, Some(frames), endpoint),
        |(first, frames, endpoint)| async move {
            let mut frames = frames?;
            let next = match first {
                Some(next) => Some(next),
                None => frames.next().await,
            };
            let line = match next? {
                Next::Message(m) => match json::from_protobuf(&endpoint.output, m) {
                    Ok(json) => json::stream_result(&json),
                    Err(status) => {
                        return Some((chunk(json::stream_error(&status)), (None, None, endpoint)))
                    }
                },
                Next::End(s) if s.code() != Code::Ok => {
                    return Some((chunk(json::stream_error(&s)), (None, None, endpoint)))
                }
                Next::End(_) => return None,
            };
            Some((chunk(line), (None, Some(frames), endpoint)))
        },
    );
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        Body::from_stream(chunks),
    )
        .into_response()
}

/// One line of a streamed answer as its chunk.
fn chunk(line: Vec<u8>) -> Result<Bytes, std::io::Error> {
    Ok(Bytes::from(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_annotated_method_of_etcd_is_a_route() {
        let endpoints = endpoints(1024);
        let find = |path: &str| {
            endpoints
                .iter()
                .find(|(p, _)| p == path)
                .map(|(_, e)| e)
                .unwrap_or_else(|| panic!("no route {path}"))
        };
        let range = find("/v3/kv/range");
        assert_eq!(range.grpc_path, "/etcdserverpb.KV/Range");
        assert_eq!(range.input.full_name(), "etcdserverpb.RangeRequest");
        assert!(!range.streams_in && !range.streams_out);
        let watch = find("/v3/watch");
        assert!(watch.streams_in && watch.streams_out);
        assert_eq!(
            find("/v3/lease/keepalive").grpc_path,
            "/etcdserverpb.Lease/LeaseKeepAlive"
        );
        assert_eq!(
            find("/v3/cluster/member/list").grpc_path,
            "/etcdserverpb.Cluster/MemberList"
        );
        assert_eq!(find("/v3/lock/lock").grpc_path, "/v3lockpb.Lock/Lock");
        assert!(find("/v3/election/observe").streams_out);
        assert_eq!(
            find("/v3/kv/compaction").grpc_path,
            "/etcdserverpb.KV/Compact"
        );
    }
}
