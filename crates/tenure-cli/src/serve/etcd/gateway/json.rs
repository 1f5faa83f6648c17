//! JSON as etcd's gateway (grpc-gateway 1 with `OrigName`) reads and writes it: protobuf's
//! JSON mapping with the .proto field names (`range_end`, `create_revision`, `ID`, `TTL`),
//! 64-bit integers as strings, bytes in base64, enums by name, fields at their default value
//! left out. Unknown fields are ignored, and both field spellings (`range_end`, `rangeEnd`)
//! and both integer forms are read, as etcd's gateway does.
//!
//! Errors are etcd's gateway's too: `{"error", "message", "code"}` for a call with one answer,
//! `{"error": {"grpc_code", "http_code", "message", "http_status"}}` inside a stream, and the
//! HTTP status grpc-gateway 1 gives each gRPC code.

use axum::body::Bytes;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use prost::Message;
use prost_reflect::{DeserializeOptions, DynamicMessage, MessageDescriptor, SerializeOptions};
use serde::Serialize;
use tonic::{Code, Status};

/// A JSON request as the protobuf message `input`.
///
/// # Errors
/// Malformed JSON, or a value that does not fit its field (the message says where).
pub(super) fn to_protobuf(
    input: &MessageDescriptor,
    json: &serde_json::Value,
) -> Result<Vec<u8>, String> {
    // `null` (or an empty body) is the empty request, as etcd's gateway reads it.
    let empty = serde_json::Value::Object(serde_json::Map::new());
    let json = if json.is_null() { &empty } else { json };
    let options = DeserializeOptions::new().deny_unknown_fields(false);
    let message = DynamicMessage::deserialize_with_options(input.clone(), json, &options)
        .map_err(|e| e.to_string())?;
    Ok(message.encode_to_vec())
}

/// The first JSON value of a request body (etcd's gateway reads one and ignores the rest);
/// an empty body is the empty request.
///
/// # Errors
/// Malformed JSON.
pub(super) fn first_value(body: &[u8]) -> Result<serde_json::Value, String> {
    let mut values = serde_json::Deserializer::from_slice(body).into_iter::<serde_json::Value>();
    match values.next() {
        None => Ok(serde_json::Value::Null),
        Some(value) => value.map_err(|e| e.to_string()),
    }
}

/// The protobuf message `output` as etcd's gateway writes it (its fields in their order).
///
/// # Errors
/// A message that is not an `output` (a bug of the room: the answer came from its own
/// service).
pub(super) fn from_protobuf(output: &MessageDescriptor, message: Bytes) -> Result<Vec<u8>, Status> {
    let message = DynamicMessage::decode(output.clone(), message)
        .map_err(|e| Status::internal(format!("undecodable answer: {e}")))?;
    let options = SerializeOptions::new().use_proto_field_name(true);
    let mut json = Vec::new();
    message
        .serialize_with_options(&mut serde_json::Serializer::new(&mut json), &options)
        .map_err(|e| Status::internal(format!("unrepresentable answer: {e}")))?;
    Ok(json)
}

/// The HTTP status grpc-gateway 1 answers a gRPC code with.
pub(super) fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::REQUEST_TIMEOUT,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A JSON answer.
pub(super) fn answer(status: StatusCode, json: &impl Serialize) -> Response {
    raw_answer(status, serde_json::to_vec(json).unwrap_or_default())
}

/// A JSON answer already written.
pub(super) fn raw_answer(status: StatusCode, body: Vec<u8>) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// The failure of a call with one answer.
pub(super) fn error(status: &Status) -> Response {
    #[derive(Serialize)]
    struct Unary<'a> {
        error: &'a str,
        message: &'a str,
        code: i32,
    }
    answer(
        http_status(status.code()),
        &Unary {
            error: status.message(),
            message: status.message(),
            code: status.code() as i32,
        },
    )
}

/// The failure of a stream, as its last line.
pub(super) fn stream_error(status: &Status) -> Vec<u8> {
    #[derive(Serialize)]
    struct Failure<'a> {
        grpc_code: i32,
        http_code: u16,
        message: &'a str,
        http_status: &'a str,
    }
    #[derive(Serialize)]
    struct Stream<'a> {
        error: Failure<'a>,
    }
    let http = http_status(status.code());
    let mut line = serde_json::to_vec(&Stream {
        error: Failure {
            grpc_code: status.code() as i32,
            http_code: http.as_u16(),
            message: status.message(),
            http_status: http.canonical_reason().unwrap_or(""),
        },
    })
    .unwrap_or_default();
    line.push(b'\n');
    line
}

/// One answer of a stream (written by [`from_protobuf`]) as its line.
pub(super) fn stream_result(result: &[u8]) -> Vec<u8> {
    let mut line = Vec::with_capacity(result.len() + 12);
    line.extend_from_slice(b"{\"result\":");
    line.extend_from_slice(result);
    line.extend_from_slice(b"}\n");
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_etcd_proto::etcdserverpb::{compare, Compare, RangeResponse, ResponseHeader};
    use tenure_etcd_proto::mvccpb::KeyValue;

    fn descriptor(name: &str) -> MessageDescriptor {
        super::super::pool()
            .get_message_by_name(name)
            .unwrap_or_else(|| panic!("{name}"))
    }

    #[test]
    fn answers_use_etcds_names_strings_for_64_bits_base64_and_leave_defaults_out() {
        let answer = RangeResponse {
            header: Some(ResponseHeader {
                cluster_id: 15118495548433857066,
                member_id: 1,
                revision: 2,
                raft_term: 2,
            }),
            kvs: vec![KeyValue {
                key: b"foo".to_vec(),
                create_revision: 2,
                mod_revision: 2,
                version: 1,
                value: b"bar".to_vec(),
                lease: 0,
            }],
            more: false,
            count: 1,
        };
        let json = from_protobuf(
            &descriptor("etcdserverpb.RangeResponse"),
            answer.encode_to_vec().into(),
        )
        .unwrap();
        let text = String::from_utf8(json).unwrap();
        assert!(
            text.starts_with(r#"{"header":{"cluster_id":"#),
            "in field order: {text}"
        );
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        // What etcd 3.4.23's gateway answered for the same key.
        let etcd: serde_json::Value = serde_json::from_str(
            r#"{"header":{"cluster_id":"15118495548433857066","member_id":"1","revision":"2","raft_term":"2"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"2","version":"1","value":"YmFy"}],"count":"1"}"#,
        )
        .unwrap();
        assert_eq!(json, etcd);
    }

    #[test]
    fn requests_read_both_spellings_numbers_as_strings_enums_by_name_and_ignore_the_unknown() {
        let json: serde_json::Value = serde_json::from_str(
            r#"{"key":"Zm9v","target":"CREATE","create_revision":"7","result":1,"retry":3}"#,
        )
        .unwrap();
        let bytes = to_protobuf(&descriptor("etcdserverpb.Compare"), &json).unwrap();
        let compare = Compare::decode(bytes.as_slice()).unwrap();
        assert_eq!(compare.key, b"foo");
        assert_eq!(compare.target(), compare::CompareTarget::Create);
        assert_eq!(compare.result(), compare::CompareResult::Greater);
        assert_eq!(
            compare.target_union,
            Some(compare::TargetUnion::CreateRevision(7))
        );
        let camel: serde_json::Value =
            serde_json::from_str(r#"{"key":"Zm9v","rangeEnd":"Zm9w"}"#).unwrap();
        let bytes = to_protobuf(&descriptor("etcdserverpb.RangeRequest"), &camel).unwrap();
        let range =
            tenure_etcd_proto::etcdserverpb::RangeRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(range.range_end, b"fop");
    }

    #[test]
    fn malformed_requests_are_refused() {
        assert!(first_value(b"{\"key\":").is_err());
        assert_eq!(first_value(b"").unwrap(), serde_json::Value::Null);
        let empty = to_protobuf(
            &descriptor("etcdserverpb.StatusRequest"),
            &serde_json::Value::Null,
        );
        assert_eq!(
            empty.unwrap(),
            Vec::<u8>::new(),
            "no body: the empty request"
        );
        assert_eq!(first_value(b"{} {\"x\":1}").unwrap(), serde_json::json!({}));
        let bad: serde_json::Value = serde_json::from_str(r#"{"key":"!!!"}"#).unwrap();
        assert!(to_protobuf(&descriptor("etcdserverpb.RangeRequest"), &bad).is_err());
        let array: serde_json::Value = serde_json::from_str("[1]").unwrap();
        assert!(to_protobuf(&descriptor("etcdserverpb.RangeRequest"), &array).is_err());
    }

    #[test]
    fn errors_look_like_etcds() {
        let status = Status::not_found("etcdserver: requested lease not found");
        let unary = error(&status);
        assert_eq!(unary.status(), StatusCode::NOT_FOUND);
        let line: serde_json::Value = serde_json::from_slice(&stream_error(&status)).unwrap();
        assert_eq!(
            line,
            serde_json::json!({"error": {"grpc_code": 5, "http_code": 404,
                "message": "etcdserver: requested lease not found", "http_status": "Not Found"}})
        );
        let result: serde_json::Value =
            serde_json::from_slice(&stream_result(br#"{"ID":"5"}"#)).unwrap();
        assert_eq!(result, serde_json::json!({"result": {"ID": "5"}}));
        assert_eq!(
            http_status(Code::FailedPrecondition),
            StatusCode::PRECONDITION_FAILED
        );
    }
}
