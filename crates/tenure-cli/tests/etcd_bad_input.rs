//! Bad input against `tenure serve --etcd-listen`, side by side with a real etcd
//! (`tests/support/etcd.rs`): oversized requests (etcd's 1.5 MiB limit and gRPC's 2 MiB), too
//! many operations in a Txn, TTL ≤ 0, a range_end below its key, an unknown lease, malformed
//! protobuf and JSON, and streams opened and abandoned. Each gets etcd's answer and changes
//! nothing; the server carries on.

mod support;

use etcd_client::{Client, GetOptions, PutOptions, Txn, TxnOp, WatchOptions};
use std::time::Duration;
use support::etcd::*;

side_by_side!(
    oversized,
    too_many_ops,
    range_end_below_key,
    malformed_protobuf,
    abandoned_streams
);

/// Every key there is, and the revision: what a refused request must leave as it was.
async fn state(c: &mut Client) -> String {
    let all = c
        .get("", Some(GetOptions::new().with_all_keys().with_keys_only()))
        .await
        .expect("get");
    let keys: Vec<String> = all
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect();
    format!(
        "rev {} keys {keys:?}",
        all.header().map_or(0, |h| h.revision())
    )
}

fn oversized(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    // etcdctl reads a value from its standard input: 1.5 MiB, over the limit with its key.
    let big = vec![b'a'; 1536 * 1024];
    t.record_run(
        "etcdctl put 1.5 MiB",
        &etcdctl_input(target, &["put", "big"], Some(&big)),
    );
    t.record_run(
        "etcdctl put 1.4 MiB",
        &etcdctl_input(target, &["put", "fits"], Some(&big[..1400 * 1024])),
    );
    let more = on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        let before = state(&mut c).await;
        t.record("before", &before);
        let value = vec![b'b'; 1600 * 1024];
        t.record(
            "put 1.6 MiB",
            c.put("big", value, None)
                .await
                .map_or_else(failure, |_| "put".into()),
        );
        let huge = vec![b'c'; 2200 * 1024];
        t.record(
            "put 2.2 MiB",
            c.put("big", huge, None)
                .await
                .map_or_else(failure, |_| "put".into()),
        );
        let ops: Vec<TxnOp> = (0..4)
            .map(|i| TxnOp::put(format!("t/{i}"), vec![b'd'; 400 * 1024], None))
            .collect();
        t.record(
            "txn of 1.6 MiB",
            c.txn(Txn::new().and_then(ops))
                .await
                .map_or_else(failure, |_| "done".into()),
        );
        t.record("unchanged", (state(&mut c).await == before).to_string());
        t
    });
    t.lines.extend(more.lines);
    let value = base64_of(&vec![b'e'; 1600 * 1024]);
    let reply = target.post(
        "/v3/kv/put",
        &format!(r#"{{"key":"Zm9v","value":"{value}"}}"#),
    );
    t.record(
        "gateway put 1.6 MiB",
        format!("{} {}", reply.status, reply.text()),
    );
    t
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn too_many_ops(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    let ops: String = (0..129).map(|i| format!("put k{i} v\n")).collect();
    let input = format!("\n{ops}\n\n");
    t.record_run(
        "etcdctl txn of 129 puts",
        &etcdctl_input(target, &["txn"], Some(input.as_bytes())),
    );
    let ops: String = (0..128).map(|i| format!("put k{i} v\n")).collect();
    let input = format!("\n{ops}\n\n");
    t.record_run(
        "etcdctl txn of 128 puts",
        &etcdctl_input(target, &["txn"], Some(input.as_bytes())),
    );
    let compares: String = (0..129)
        .map(|i| format!("version(\"k{i}\") = \"0\"\n"))
        .collect();
    let input = format!("{compares}\nput x y\n\n\n");
    t.record_run(
        "etcdctl txn of 129 compares",
        &etcdctl_input(target, &["txn"], Some(input.as_bytes())),
    );
    t.record_json(
        "after",
        &etcdctl(target, &["get", "x", "-w", "json"]).json(),
    );
    t
}

fn range_end_below_key(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    for key in ["a", "b", "c"] {
        etcdctl(target, &["put", key, "v"]);
    }
    t.record_json(
        "get b a",
        &etcdctl(target, &["get", "b", "a", "-w", "json"]).json(),
    );
    t.record_run("del c a", &etcdctl(target, &["del", "c", "a"]));
    t.record_json("watch b..a", &{
        let reply = target.post("/v3/kv/range", r#"{"key":"Yg==","range_end":"YQ=="}"#);
        reply.json()
    });
    let more = on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        let got = c.get("c", Some(GetOptions::new().with_range("b"))).await;
        t.record(
            "get c..b",
            got.map_or_else(failure, |g| format!("{} keys", g.kvs().len())),
        );
        t.record(
            "put with an unknown lease",
            c.put("x", "y", Some(PutOptions::new().with_lease(99)))
                .await
                .map_or_else(failure, |_| "put".into()),
        );
        t.record("state", state(&mut c).await);
        t
    });
    t.lines.extend(more.lines);
    t
}

/// A raw gRPC call over HTTP/2 without TLS (the `h2` crate, as tonic's own transport): the
/// status it ends with, from a trailers-only answer or the trailers after the body. The body
/// goes out with the headers' stream; a server may answer and reset the stream before it has
/// read it (grpc-go does for an unknown method), and the answer stands.
fn raw_grpc(target: &Target, path: &str, body: &[u8]) -> String {
    let call = async {
        let tcp = tokio::net::TcpStream::connect(target.addr)
            .await
            .expect("connect");
        let (client, connection) = h2::client::handshake(tcp).await.expect("HTTP/2");
        tokio::spawn(connection);
        let request = http::Request::post(format!("{}{path}", target.url()))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .expect("request");
        let mut client = client.ready().await.expect("ready");
        let (answer, mut send) = client.send_request(request, false).expect("send");
        // The server may have reset the stream already: its answer is what counts.
        let _ = send.send_data(bytes::Bytes::copy_from_slice(body), true);
        let (head, mut rest) = answer.await.expect("an answer").into_parts();
        if head.headers.contains_key("grpc-status") {
            return head.headers;
        }
        while let Some(chunk) = rest.data().await {
            let chunk = chunk.expect("the body");
            let _ = rest.flow_control().release_capacity(chunk.len());
        }
        rest.trailers()
            .await
            .expect("trailers")
            .expect("a gRPC answer ends with trailers")
    };
    let fields = on_runtime(async {
        tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("an answer within 10 s")
    });
    let field = |name: &str| {
        fields
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default()
    };
    format!(
        "status {} message {:?}",
        field("grpc-status"),
        percent_decoded(&field("grpc-message"))
    )
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() + 1 {
            if let Ok(b) = u8::from_str_radix(&text[i + 1..(i + 3).min(text.len())], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Waits (at most 15 s, else panics naming `what`) until `prefix` holds `count` keys.
async fn keys_become(c: &mut Client, prefix: &str, count: i64, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let keys = c
            .get(
                prefix,
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
            .expect("get");
        if keys.count() == count {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within 15 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn malformed_protobuf(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    // Exact: what grpc-go answers for an unknown method or service, a message over the limit
    // and a compressed message without an encoding.
    t.record(
        "unknown method",
        raw_grpc(target, "/etcdserverpb.KV/Nope", b"\0\0\0\0\0"),
    );
    t.record(
        "unknown service",
        raw_grpc(target, "/etcdserverpb.Nope/Range", b"\0\0\0\0\0"),
    );
    t.record(
        "compressed without an encoding",
        raw_grpc(target, "/etcdserverpb.KV/Range", b"\x01\0\0\0\x03abc"),
    );
    // The codes: the texts are each protobuf library's own.
    let code = |s: String| s.split(" message").next().unwrap_or("").to_string();
    t.record(
        "garbage",
        code(raw_grpc(
            target,
            "/etcdserverpb.KV/Range",
            b"\0\0\0\0\x03abc",
        )),
    );
    t.record(
        "a message cut short",
        code(raw_grpc(
            target,
            "/etcdserverpb.KV/Range",
            b"\0\0\0\0\x10abc",
        )),
    );
    t.record(
        "a bad field in a put",
        code(raw_grpc(
            target,
            "/etcdserverpb.KV/Put",
            b"\0\0\0\0\x02\x0a\x05",
        )),
    );
    t.record_json(
        "state",
        &etcdctl(target, &["get", "", "--from-key", "-w", "json"]).json(),
    );
    t
}

fn abandoned_streams(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    on_runtime(async {
        // Streams opened, then the connection dropped without closing them.
        let mut c = connect(target).await;
        let mut watch = c
            .watch("a", Some(WatchOptions::new().with_prefix()))
            .await
            .expect("watch");
        watch.message().await.expect("created");
        let lease = c.lease_grant(30, None).await.expect("grant").id();
        let (_keeper, _alive) = c.lease_keep_alive(lease).await.expect("keep alive");
        // A lock waiter that goes away while it waits leaves no key behind.
        let mut holder = connect(target).await;
        let held = holder.lock("abandoned", None).await.expect("lock");
        let mut waiter = connect(target).await;
        let waiting = tokio::spawn(async move { waiter.lock("abandoned", None).await });
        keys_become(&mut c, "abandoned/", 2, "the waiter's key appears").await;
        waiting.abort();
        drop(watch);
        drop(c);
        holder.unlock(held.key()).await.expect("unlock");
    });
    // A gateway watch whose client goes away, and a raw TCP connection that says nothing.
    drop(GatewayStream::open(
        target.addr,
        "/v3/watch",
        r#"{"create_request":{"key":"YQ=="}}"#,
    ));
    let silent = std::net::TcpStream::connect(target.addr).expect("connect");
    let more = on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        keys_become(&mut c, "abandoned/", 0, "the abandoned waiter's key goes").await;
        t.record("the abandoned waiter's key", "gone");
        let put = c
            .put("after", "ok", None)
            .await
            .expect("the server still answers");
        t.record(
            "still answering",
            put.header().map_or(0, |h| h.revision()).to_string(),
        );
        t
    });
    drop(silent);
    t.lines.extend(more.lines);
    t
}
