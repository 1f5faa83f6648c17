//! etcd's gRPC statuses, with etcd's exact codes and texts (etcd's
//! `api/v3rpc/rpctypes/error.go`): clients map errors back by their message, so a text here
//! is never reworded.

use tonic::{Code, Status};

/// A method etcd has and this room does not serve: gRPC's `UNIMPLEMENTED`, with grpc-go's own
/// text for a method a server does not implement (`method Defragment not implemented`).
/// docs/guides/etcd.md lists every such method and why.
pub(super) fn unimplemented(method: &str) -> Status {
    Status::unimplemented(format!("method {method} not implemented"))
}

/// A write larger than `--etcd-max-request-bytes`.
pub(super) fn request_too_large() -> Status {
    Status::invalid_argument("etcdserver: request is too large")
}

/// A call without a token while the server has one.
pub(super) fn user_empty() -> Status {
    Status::invalid_argument("etcdserver: user name is empty")
}

/// A call with a token that is not the server's.
pub(super) fn invalid_token() -> Status {
    Status::new(Code::Unauthenticated, "etcdserver: invalid auth token")
}

/// `Authenticate` with a password that is not the server's token.
pub(super) fn auth_failed() -> Status {
    Status::invalid_argument("etcdserver: authentication failed, invalid user ID or password")
}

/// `Authenticate` without `--token-file`.
pub(super) fn auth_not_enabled() -> Status {
    Status::failed_precondition("etcdserver: authentication is not enabled")
}

/// A stream ended because this member stops (clients carry on with another endpoint).
pub(super) fn stopped() -> Status {
    Status::unavailable("etcdserver: server stopped")
}
