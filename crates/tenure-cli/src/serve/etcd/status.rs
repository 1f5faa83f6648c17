//! etcd's gRPC statuses, with etcd's exact codes and texts (etcd's
//! `api/v3rpc/rpctypes/error.go`): clients map errors back by their message, so a text here
//! is never reworded.

use tonic::{Code, Status};

/// Why a call was refused: a status of the room's, or the layer's error as etcd answers it.
/// (A type of the room's own, so that `?` works on both in a method's body.)
#[derive(Debug)]
pub(super) struct Refused(pub Status);

impl From<Status> for Refused {
    fn from(status: Status) -> Refused {
        Refused(status)
    }
}

impl From<tenure::etcd::Error> for Refused {
    fn from(e: tenure::etcd::Error) -> Refused {
        Refused(from_layer(&e))
    }
}

/// An error of the layer's Lock or Election recipes, as etcd's `v3lock` and `v3election`
/// answer them: they call etcd's client in process, whose errors reach gRPC as plain errors,
/// so every one goes out with code `UNKNOWN` and etcd's text (`etcdserver: requested lease
/// not found`, `election: not leader`) — except the database's failures, which keep their
/// code (`UNAVAILABLE`: try again).
pub(super) fn from_recipe(e: tenure::etcd::Error) -> Refused {
    match e {
        tenure::etcd::Error::Store(_) => Refused::from(e),
        e => Refused(Status::unknown(e.to_string())),
    }
}

/// The layer's error with the code and text etcd answers it with.
pub(super) fn from_layer(e: &tenure::etcd::Error) -> Status {
    Status::new(Code::from_i32(e.code().number()), e.to_string())
}

/// A method etcd has and this room does not serve: gRPC's `UNIMPLEMENTED`, with grpc-go's own
/// text for a method a server does not implement (`method Defragment not implemented`).
/// docs/guides/etcd.md lists every such method and why.
pub(super) fn unimplemented(method: &str) -> Status {
    Status::unimplemented(format!("method {method} not implemented"))
}

/// A write larger than etcd's request limit (1.5 MiB).
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
