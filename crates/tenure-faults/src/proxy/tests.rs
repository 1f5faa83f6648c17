use std::io::ErrorKind;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{timeout, Instant};

use super::{Fault, Proxy};

/// How long "nothing arrives" is watched for.
const QUIET: Duration = Duration::from_millis(300);
/// Upper bound of every wait that should succeed.
const BOUND: Duration = Duration::from_secs(1);

/// An echo server on 127.0.0.1:0 that also reports every chunk it receives.
struct Upstream {
    addr: std::net::SocketAddr,
    received: mpsc::UnboundedReceiver<Vec<u8>>,
}

impl Upstream {
    async fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, received) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0; 16 * 1024];
                    while let Ok(n @ 1..) = socket.read(&mut buf).await {
                        let _ = tx.send(buf[..n].to_vec());
                        if socket.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                    let _ = socket.shutdown().await;
                });
            }
        });
        Upstream { addr, received }
    }

    /// The next `n` bytes the server received, within [`BOUND`].
    async fn receives(&mut self, n: usize) -> Vec<u8> {
        let mut got = Vec::new();
        timeout(BOUND, async {
            while got.len() < n {
                got.extend(self.received.recv().await.unwrap());
            }
        })
        .await
        .expect("upstream received the bytes in time");
        got
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| u8::try_from(i * 7 % 251).expect("below 251"))
        .collect()
}

async fn read_n(socket: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    timeout(BOUND, socket.read_exact(&mut buf))
        .await
        .expect("reply in time")
        .expect("reply");
    buf
}

/// Writes `msg` and reads its echo; returns how long that took.
async fn round_trip(socket: &mut TcpStream, msg: &[u8]) -> Duration {
    let start = Instant::now();
    socket.write_all(msg).await.unwrap();
    assert_eq!(read_n(socket, msg.len()).await, msg);
    start.elapsed()
}

/// Asserts that nothing arrives and the socket stays open for [`QUIET`].
async fn assert_quiet(socket: &mut TcpStream) {
    let mut buf = [0; 64];
    let read = timeout(QUIET, socket.read(&mut buf)).await;
    assert!(read.is_err(), "expected silence, got {read:?}");
}

/// Asserts that the socket is closed (RST, or at least EOF) within [`BOUND`], with no data.
async fn assert_closed(socket: &mut TcpStream) -> Option<ErrorKind> {
    let mut buf = [0; 64];
    match timeout(BOUND, socket.read(&mut buf))
        .await
        .expect("closed in time")
    {
        Ok(0) => None,
        Ok(n) => panic!("expected a closed socket, read {:?}", &buf[..n]),
        Err(error) => Some(error.kind()),
    }
}

async fn connect(proxy: &Proxy) -> TcpStream {
    timeout(BOUND, TcpStream::connect(proxy.addr()))
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn pass_relays_both_ways_in_order_with_half_close() {
    let upstream = Upstream::start().await;
    let proxy = Proxy::start(upstream.addr).await.unwrap();
    assert_eq!(proxy.fault(), Fault::Pass);
    let data = pattern(64 * 1024);
    let (mut read, mut write) = connect(&proxy).await.into_split();
    let send = async {
        write.write_all(&data).await.unwrap();
        write.shutdown().await.unwrap(); // EOF travels to the server, which then closes
    };
    let mut echoed = Vec::new();
    let (_, received) = tokio::join!(send, timeout(BOUND, read.read_to_end(&mut echoed)));
    received.expect("echo and EOF in time").unwrap();
    assert!(echoed == data, "echo differs from what was sent");
    let stats = proxy.stats();
    assert_eq!(
        (stats.accepted, stats.bytes_up, stats.bytes_down),
        (1, 65536, 65536)
    );
    assert_eq!((stats.reset, stats.cut), (0, 0));
}

#[tokio::test]
async fn latency_delays_each_hop_without_serialising() {
    let upstream = Upstream::start().await;
    let proxy = Proxy::start(upstream.addr).await.unwrap();
    let mut client = connect(&proxy).await;
    proxy.set(Fault::Latency(Duration::from_millis(150)));
    let took = round_trip(&mut client, b"ping").await;
    assert!(
        took >= Duration::from_millis(300),
        "round trip took {took:?}"
    );
    // Five requests 20 ms apart overlap in flight: about 380 ms in all, not 5 × 300 ms.
    let start = Instant::now();
    for _ in 0..5 {
        client.write_all(b"ping").await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(read_n(&mut client, 20).await, b"ping".repeat(5));
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(380) && took < Duration::from_millis(900),
        "{took:?}"
    );
    proxy.set(Fault::Pass);
    let took = round_trip(&mut client, b"pong").await;
    assert!(
        took < Duration::from_millis(150),
        "round trip took {took:?}"
    );
}

#[tokio::test]
async fn blackhole_holds_bytes_then_delivers_them_intact() {
    let mut upstream = Upstream::start().await;
    let proxy = Proxy::start(upstream.addr).await.unwrap();
    let mut client = connect(&proxy).await;
    round_trip(&mut client, b"hello").await;
    upstream.receives(5).await;
    proxy.set(Fault::Blackhole);
    let data = pattern(32 * 1024);
    client.write_all(&data).await.unwrap();
    assert_quiet(&mut client).await;
    assert!(
        upstream.received.try_recv().is_err(),
        "the server got bytes through a blackhole"
    );
    // A new connection is accepted but nothing flows on it either.
    let mut late = connect(&proxy).await;
    late.write_all(b"late").await.unwrap();
    assert_quiet(&mut late).await;
    proxy.set(Fault::Pass);
    assert!(
        read_n(&mut client, data.len()).await == data,
        "held bytes differ"
    );
    assert_eq!(read_n(&mut late, 4).await, b"late");
    assert_eq!(proxy.stats().accepted, 2);
}

#[tokio::test]
async fn reset_resets_open_and_new_connections() {
    let upstream = Upstream::start().await;
    let proxy = Proxy::start(upstream.addr).await.unwrap();
    let mut client = connect(&proxy).await;
    round_trip(&mut client, b"hello").await;
    proxy.set(Fault::Reset);
    assert_eq!(
        assert_closed(&mut client).await,
        Some(ErrorKind::ConnectionReset)
    );
    let mut late = connect(&proxy).await;
    assert_eq!(
        assert_closed(&mut late).await,
        Some(ErrorKind::ConnectionReset)
    );
    assert_eq!(proxy.stats().reset, 2);
    proxy.set(Fault::Pass);
    let mut healed = connect(&proxy).await;
    round_trip(&mut healed, b"again").await;
    assert_eq!(proxy.stats().reset, 2);
}

#[tokio::test]
async fn reset_pulse_is_not_missed() {
    let upstream = Upstream::start().await;
    let proxy = Proxy::start(upstream.addr).await.unwrap();
    let mut client = connect(&proxy).await;
    round_trip(&mut client, b"hello").await;
    proxy.set(Fault::Reset);
    proxy.set(Fault::Pass); // no task ran in between (current-thread runtime)
    assert_eq!(
        assert_closed(&mut client).await,
        Some(ErrorKind::ConnectionReset)
    );
    assert_eq!(proxy.stats().reset, 1);
}

#[tokio::test]
async fn cut_after_request_delivers_the_request_but_not_the_reply() {
    let mut upstream = Upstream::start().await;
    let proxy = Proxy::start(upstream.addr).await.unwrap();
    let mut open = connect(&proxy).await;
    round_trip(&mut open, b"hello").await;
    upstream.receives(5).await;
    proxy.set(Fault::CutAfterRequest);
    open.write_all(b"commit").await.unwrap();
    assert_eq!(upstream.receives(6).await, b"commit");
    assert_eq!(
        assert_closed(&mut open).await,
        Some(ErrorKind::ConnectionReset)
    );
    // New connections are cut too, after their first request.
    let mut late = connect(&proxy).await;
    late.write_all(b"again").await.unwrap();
    assert_eq!(upstream.receives(5).await, b"again");
    assert_eq!(
        assert_closed(&mut late).await,
        Some(ErrorKind::ConnectionReset)
    );
    let stats = proxy.stats();
    assert_eq!((stats.cut, stats.bytes_up, stats.bytes_down), (2, 16, 5));
}

#[tokio::test]
async fn one_way_loss_delivers_requests_and_holds_replies() {
    let mut upstream = Upstream::start().await;
    let proxy = Proxy::start(upstream.addr).await.unwrap();
    let mut client = connect(&proxy).await;
    round_trip(&mut client, b"hello").await;
    upstream.receives(5).await;
    proxy.set(Fault::OneWayLoss);
    client.write_all(b"commit").await.unwrap();
    assert_eq!(upstream.receives(6).await, b"commit");
    assert_quiet(&mut client).await;
    assert_eq!(proxy.stats().bytes_down, 5);
    proxy.set(Fault::Pass);
    assert_eq!(read_n(&mut client, 6).await, b"commit");
    assert_eq!(proxy.stats().bytes_down, 11);
}

#[tokio::test]
async fn drop_closes_the_listener_and_connections() {
    let upstream = Upstream::start().await;
    let proxy = Proxy::start(upstream.addr).await.unwrap();
    let addr = proxy.addr();
    let mut client = connect(&proxy).await;
    round_trip(&mut client, b"hello").await;
    // Also a connection held by a fault, and a queued reply.
    proxy.set(Fault::OneWayLoss);
    client.write_all(b"held").await.unwrap();
    drop(proxy);
    assert_closed(&mut client).await;
    match timeout(BOUND, TcpStream::connect(addr)).await.unwrap() {
        Err(error) => assert_eq!(error.kind(), ErrorKind::ConnectionRefused),
        Ok(mut late) => {
            assert_closed(&mut late).await;
        }
    }
}
