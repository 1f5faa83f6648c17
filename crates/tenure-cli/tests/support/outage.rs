//! Making the database unreachable for one `tenure` process, and reachable again.
//!
//! - PostgreSQL / MariaDB: [`Cut`], a loopback TCP relay the process connects through; `cut`
//!   resets every open connection and refuses new ones until `restore` (a stopped proxy).
//! - SQLite: [`SqliteLock`], an exclusive transaction on the file, so that every write waits
//!   for its busy timeout and fails (a file nobody can write).

use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

/// A TCP relay on 127.0.0.1 to `upstream` that can be cut and restored.
pub(crate) struct Cut {
    port: u16,
    down: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Cut {
    /// Relays to `upstream` (`host:port`). The accepting thread lives as long as the test.
    pub(crate) fn start(upstream: &str) -> Cut {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let port = listener.local_addr().expect("relay address").port();
        let down = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let (upstream, down2, open2) = (upstream.to_string(), Arc::clone(&down), Arc::clone(&open));
        thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                if down2.load(Ordering::SeqCst) {
                    continue; // dropped: the client sees the connection closed
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let _ = relay(client, server, &open2);
            }
        });
        Cut { port, down, open }
    }

    /// `url` with its host and port replaced by this relay's.
    pub(crate) fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let hostport_at = authority.rfind('@').map_or(0, |i| i + 1);
        format!(
            "{scheme}://{}127.0.0.1:{}{path}",
            &authority[..hostport_at],
            self.port
        )
    }

    /// Resets every open connection and refuses new ones.
    pub(crate) fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        for stream in self.open.lock().expect("relay lock").drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Accepts connections again.
    pub(crate) fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

/// `host:port` of a database URL.
pub(crate) fn host_port(url: &str) -> String {
    let rest = url.split_once("://").expect("a URL with a scheme").1;
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    authority[authority.rfind('@').map_or(0, |i| i + 1)..].to_string()
}

fn relay(client: TcpStream, server: TcpStream, open: &Mutex<Vec<TcpStream>>) -> io::Result<()> {
    let mut list = open.lock().expect("relay lock");
    list.push(client.try_clone()?);
    list.push(server.try_clone()?);
    drop(list);
    for (mut from, mut to) in [(client.try_clone()?, server.try_clone()?), (server, client)] {
        thread::spawn(move || {
            let _ = io::copy(&mut from, &mut to);
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
        });
    }
    Ok(())
}

/// An exclusive transaction on an SQLite file, held until dropped.
pub(crate) struct SqliteLock {
    release: Option<mpsc::Sender<()>>,
    done: Option<thread::JoinHandle<()>>,
}

impl SqliteLock {
    /// Takes the lock (returns once it is held).
    pub(crate) fn take(path: &str) -> SqliteLock {
        use sqlx::Connection;
        let (held_tx, held) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let path = path.to_string();
        let done = thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let options = path
                    .parse::<sqlx::sqlite::SqliteConnectOptions>()
                    .expect("sqlite URL")
                    .busy_timeout(std::time::Duration::from_secs(10));
                let mut conn = sqlx::SqliteConnection::connect_with(&options)
                    .await
                    .expect("open the SQLite file");
                sqlx::query("BEGIN EXCLUSIVE")
                    .execute(&mut conn)
                    .await
                    .expect("lock the SQLite file");
                held_tx.send(()).expect("report the lock");
                let _ = release_rx.recv();
                sqlx::query("ROLLBACK")
                    .execute(&mut conn)
                    .await
                    .expect("unlock the SQLite file");
            });
        });
        held.recv().expect("the lock is taken");
        SqliteLock {
            release: Some(release),
            done: Some(done),
        }
    }
}

impl Drop for SqliteLock {
    fn drop(&mut self) {
        drop(self.release.take());
        if let Some(done) = self.done.take() {
            let _ = done.join();
        }
    }
}
