//! The Rust `etcd-client` crate in a scenario: a runtime of its own, a connection, and what
//! the transcript shows of its answers.

use super::{Target, Transcript};
use etcd_client::{Client, KeyValue};
use std::future::Future;
use std::time::Duration;

/// Runs an async scenario on a runtime of its own.
pub(crate) fn on_runtime<T>(scenario: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(scenario)
}

pub(crate) async fn connect(target: &Target) -> Client {
    Client::connect([target.url()], None)
        .await
        .expect("connect")
}

/// `future`, which must complete within 15 s.
pub(crate) async fn soon<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(15), future)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 15 s"))
}

/// A lease id in both its spellings (decimal in keys' `lease`, hex in recipe keys).
pub(crate) fn alias_lease(t: &mut Transcript, id: i64, name: &str) {
    t.alias(format!("{id:x}"), name);
    t.alias(id.to_string(), name);
}

/// A key-value as the transcript shows it.
pub(crate) fn show(kv: &KeyValue) -> String {
    format!(
        "{}={} c{} m{} v{} l{}",
        String::from_utf8_lossy(kv.key()),
        String::from_utf8_lossy(kv.value()),
        kv.create_revision(),
        kv.mod_revision(),
        kv.version(),
        kv.lease()
    )
}

pub(crate) fn shows(kvs: &[KeyValue]) -> String {
    kvs.iter().map(show).collect::<Vec<_>>().join(", ")
}

/// A failure as the transcript shows it: the gRPC code and etcd's text.
pub(crate) fn failure(e: etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => format!("{:?}: {}", s.code(), s.message()),
        other => format!("{other}"),
    }
}

pub(crate) fn revision_of(header: Option<&etcd_client::ResponseHeader>) -> i64 {
    header.map_or(-1, |h| h.revision())
}

/// The next answer of a watch stream, within 10 s.
pub(crate) async fn next(
    stream: &mut etcd_client::WatchResponseStream,
) -> etcd_client::WatchResponse {
    tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("an answer within 10 s")
        .expect("message")
        .expect("the stream is open")
}
