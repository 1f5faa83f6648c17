//! A TCP proxy with injectable network faults, placed between tenure nodes (database clients)
//! and the database server.
//!
//! Each accepted connection is relayed to the upstream server by one task with two directions:
//! *up* (client → server) and *down* (server → client). Each direction reads chunks (up to
//! 16 KiB) into a queue stamped with their arrival instant, and a writer delivers them in order.
//! The current [`Fault`] is shared through a `watch` channel, so [`Proxy::set`] takes effect at
//! once on open connections as well as new ones.
//!
//! The faults and the real network faults they model:
//!
//! - [`Fault::Pass`]: a healthy network.
//! - [`Fault::Latency`]: a slow link (congestion, a distant replica, a saturated NIC). Every chunk
//!   is delivered `d` after it was read, in both directions, so a round trip costs `2 * d`.
//!   Reading goes on meanwhile, so throughput is not cut to one chunk per `d`.
//! - [`Fault::Blackhole`]: a network partition where packets are silently dropped (a firewall
//!   rule, a dead switch) — no RST, no FIN, sockets stay open and only time-outs can notice.
//!   Nothing is read or written while it holds; the held bytes flow again, intact and in order,
//!   when it is lifted, as TCP retransmission does after a partition heals. New connections are
//!   accepted (the proxy's listener is on the near side) but nothing flows on them either.
//! - [`Fault::Reset`]: a middlebox or a server restart that resets connections. Every open
//!   connection is closed with an RST to both peers; while set, new connections are reset at
//!   once. A `Reset` that is set and lifted before connection tasks ran still resets every
//!   connection that was open at that moment.
//! - [`Fault::CutAfterRequest`]: the connection dies while a request is in flight — "the request
//!   reached the server, the answer never came back". The next client → server chunk of each
//!   connection is forwarded, then both sides are reset before any reply reaches the client. The
//!   server may have committed the request; the client must treat the outcome as unknown.
//! - [`Fault::OneWayLoss`]: an asymmetric partition. Client → server bytes flow; server → client
//!   bytes are held until the fault is lifted, then they flow. The server may commit what the
//!   client does not hear about (yet).
//!
//! Dropping the [`Proxy`] stops the listener and ends every connection task, closing its
//! sockets.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

#[cfg(test)]
mod tests;

/// Size of the read buffer of each direction of a connection.
const CHUNK: usize = 16 * 1024;
/// Chunks read but not yet delivered, per direction (bounds memory under [`Fault::Latency`]).
const QUEUE: usize = 64;

/// A fault injected by the [`Proxy`]; see the module documentation for what each models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward bytes both ways.
    Pass,
    /// Deliver every chunk `d` after it was read, both directions, order kept (reading is not
    /// blocked: chunks queue with their arrival instant).
    Latency(Duration),
    /// Partition without RST: stop forwarding in both directions; connections stay open; new
    /// connections are accepted but nothing flows. Bytes not yet forwarded are held and flow
    /// again when the fault is lifted.
    Blackhole,
    /// Every open connection is closed with an RST to both peers; while set, new connections are
    /// reset at once.
    Reset,
    /// Each connection forwards the next client → server chunk, then resets both sides before any
    /// reply reaches the client. Applies to every connection while set (once per connection).
    CutAfterRequest,
    /// Client → server bytes flow; server → client bytes are held until the fault is lifted.
    OneWayLoss,
}

/// Counters of a [`Proxy`] since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Client connections accepted.
    pub accepted: u64,
    /// Connections reset by [`Fault::Reset`] (open ones and new ones).
    pub reset: u64,
    /// Connections cut by [`Fault::CutAfterRequest`].
    pub cut: u64,
    /// Bytes delivered to the server.
    pub bytes_up: u64,
    /// Bytes delivered to the client.
    pub bytes_down: u64,
}

/// What every task watches: the fault, and how many times [`Fault::Reset`] was set (so that a
/// short `Reset` pulse is not missed by a task that did not run while it was set).
#[derive(Clone, Copy, Debug)]
struct State {
    fault: Fault,
    resets: u64,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    reset: AtomicU64,
    cut: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// A TCP proxy on 127.0.0.1 between database clients (tenure nodes) and the database server.
pub struct Proxy {
    addr: SocketAddr,
    state: watch::Sender<State>,
    counters: Arc<Counters>,
    acceptor: JoinHandle<()>,
}

impl Proxy {
    /// Listens on 127.0.0.1:0 and forwards each accepted connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<Proxy> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (state, watcher) = watch::channel(State {
            fault: Fault::Pass,
            resets: 0,
        });
        let counters = Arc::new(Counters::default());
        let acceptor = tokio::spawn(accept_loop(listener, upstream, watcher, counters.clone()));
        Ok(Proxy {
            addr,
            state,
            counters,
            acceptor,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the fault; it applies at once to existing and new connections.
    pub fn set(&self, fault: Fault) {
        tracing::debug!(proxy = %self.addr, ?fault, "proxy fault");
        self.state.send_modify(|state| {
            state.fault = fault;
            if fault == Fault::Reset {
                state.resets += 1;
            }
        });
    }

    /// The current fault.
    pub fn fault(&self) -> Fault {
        self.state.borrow().fault
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ProxyStats {
        let c = &self.counters;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ProxyStats {
            accepted: get(&c.accepted),
            reset: get(&c.reset),
            cut: get(&c.cut),
            bytes_up: get(&c.bytes_up),
            bytes_down: get(&c.bytes_down),
        }
    }
}

impl Drop for Proxy {
    /// Stops the listener; dropping `state` (the watch sender) ends every connection task.
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mut state: watch::Receiver<State>,
    counters: Arc<Counters>,
) {
    loop {
        let client = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => client,
                Err(error) => {
                    // E.g. out of file descriptors: do not spin.
                    tracing::warn!(%error, "proxy accept");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            changed = state.changed() => match changed {
                Ok(()) => continue,
                Err(_) => return, // the Proxy was dropped
            },
        };
        bump(&counters.accepted, 1);
        let now = *state.borrow();
        if now.fault == Fault::Reset {
            bump(&counters.reset, 1);
            reset(&[&client]);
            continue;
        }
        let state = state.clone();
        tokio::spawn(connection(
            client,
            upstream,
            state,
            now.resets,
            counters.clone(),
        ));
    }
}

/// Why a connection ended other than by EOF in both directions.
enum End {
    /// The Proxy was dropped.
    Shutdown,
    Reset,
    Cut,
    /// An I/O error on either side, passed on to the other as an RST.
    Io(io::Error),
}

/// Resolves when the connection must end whatever it is doing: on a `Reset` set since the
/// connection was accepted, or when the Proxy is dropped.
async fn interrupted(state: &mut watch::Receiver<State>, resets: u64) -> End {
    match state
        .wait_for(|s| s.fault == Fault::Reset || s.resets != resets)
        .await
    {
        Ok(_) => End::Reset,
        Err(_) => End::Shutdown,
    }
}

async fn connection(
    mut client: TcpStream,
    upstream: SocketAddr,
    state: watch::Receiver<State>,
    resets: u64,
    counters: Arc<Counters>,
) {
    let mut watcher = state.clone();
    let mut server = tokio::select! {
        end = interrupted(&mut watcher, resets) => return finish(Err(end), &[&client], &counters),
        connected = TcpStream::connect(upstream) => match connected {
            Ok(server) => server,
            Err(error) => return finish(Err(End::Io(error)), &[&client], &counters),
        },
    };
    let outcome = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let (up_tx, up_rx) = mpsc::channel(QUEUE);
        let (down_tx, down_rx) = mpsc::channel(QUEUE);
        let relay = async {
            tokio::try_join!(
                read_side(Dir::Up, client_read, up_tx, state.clone()),
                write_side(Dir::Up, up_rx, server_write, state.clone(), &counters),
                read_side(Dir::Down, server_read, down_tx, state.clone()),
                write_side(Dir::Down, down_rx, client_write, state.clone(), &counters),
            )
        };
        tokio::select! {
            relayed = relay => relayed.map(|_| ()),
            end = interrupted(&mut watcher, resets) => Err(end),
        }
    };
    finish(outcome, &[&client, &server], &counters);
}

/// Counts how a connection ended and arms an RST unless it ended by EOF or Proxy drop; the
/// sockets are closed when the caller drops them.
fn finish(outcome: Result<(), End>, sockets: &[&TcpStream], counters: &Counters) {
    match outcome {
        Ok(()) | Err(End::Shutdown) => return,
        Err(End::Reset) => bump(&counters.reset, 1),
        Err(End::Cut) => bump(&counters.cut, 1),
        Err(End::Io(error)) => tracing::debug!(%error, "proxy connection failed"),
    }
    reset(sockets);
}

/// SO_LINGER 0: closing the socket sends an RST instead of a FIN.
fn reset(sockets: &[&TcpStream]) {
    for socket in sockets {
        if let Err(error) = socket.set_zero_linger() {
            tracing::debug!(%error, "proxy SO_LINGER");
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// Client → server.
    Up,
    /// Server → client.
    Down,
}

impl Dir {
    /// Whether bytes may be read and delivered in this direction under `fault`.
    fn flows(self, fault: Fault) -> bool {
        match fault {
            Fault::Pass | Fault::Latency(_) => true,
            Fault::CutAfterRequest | Fault::OneWayLoss => self == Dir::Up,
            Fault::Blackhole | Fault::Reset => false,
        }
    }

    fn bytes(self, counters: &Counters) -> &AtomicU64 {
        match self {
            Dir::Up => &counters.bytes_up,
            Dir::Down => &counters.bytes_down,
        }
    }
}

/// Waits until bytes may flow in `dir`; returns the fault then.
async fn open(dir: Dir, state: &mut watch::Receiver<State>) -> Result<Fault, End> {
    match state.wait_for(|s| dir.flows(s.fault)).await {
        Ok(s) => Ok(s.fault),
        Err(_) => Err(End::Shutdown),
    }
}

/// Reads chunks while the fault lets them flow and queues them with their arrival instant.
/// Returns at EOF, which closes the queue.
async fn read_side(
    dir: Dir,
    mut from: ReadHalf<'_>,
    queue: mpsc::Sender<(Instant, Vec<u8>)>,
    mut state: watch::Receiver<State>,
) -> Result<(), End> {
    let mut buf = vec![0; CHUNK];
    loop {
        open(dir, &mut state).await?;
        let n = tokio::select! {
            read = from.read(&mut buf) => read.map_err(End::Io)?,
            // The flow stopped while waiting: stop reading (the read is cancel-safe).
            _ = state.wait_for(|s| !dir.flows(s.fault)) => continue,
        };
        if n == 0
            || queue
                .send((Instant::now(), buf[..n].to_vec()))
                .await
                .is_err()
        {
            return Ok(());
        }
    }
}

/// Delivers queued chunks in order, each once the fault lets it flow and its latency elapsed.
/// At the end of the queue, passes the EOF on (half-close).
async fn write_side(
    dir: Dir,
    mut queue: mpsc::Receiver<(Instant, Vec<u8>)>,
    mut to: WriteHalf<'_>,
    mut state: watch::Receiver<State>,
    counters: &Counters,
) -> Result<(), End> {
    while let Some((arrived, chunk)) = queue.recv().await {
        let fault = loop {
            let fault = open(dir, &mut state).await?;
            match fault {
                Fault::Latency(d) if Instant::now() < arrived + d => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(arrived + d) => {}
                        _ = state.changed() => {}
                    }
                }
                _ => break fault,
            }
        };
        to.write_all(&chunk).await.map_err(End::Io)?;
        bump(dir.bytes(counters), chunk.len() as u64);
        if dir == Dir::Up && fault == Fault::CutAfterRequest {
            return Err(End::Cut);
        }
    }
    let _ = to.shutdown().await;
    Ok(())
}
