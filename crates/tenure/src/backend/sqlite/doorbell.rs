//! SQLite's doorbell: how a follower in another process learns of a release at once.
//!
//! SQLite cannot push a change to another connection, but every process of one SQLite
//! database runs on one host. So next to the database file lies `<file>-tenure-bell`: after a
//! commit someone could be waiting for (a release, a demote, a handover, a pause or resume, a
//! write to rows of a feature's own), the writer rings it — it appends the lease's name and a newline — and every
//! store open on that database watches it (inotify, through the `notify` crate), reads the
//! names appended since it last looked and wakes the followers of those names. Past 64 KiB
//! the ringer empties the file; a watcher that finds it shorter than it was wakes everyone
//! ([`ANY`](crate::changes::ANY)), since it may have missed a name.
//!
//! It is rung only where someone could be waiting (as PostgreSQL's NOTIFY only where a
//! waiting mark is held): a process whose store has subscribers (a lock waiting, an elector,
//! a watch) holds a shared `flock` on `<file>-tenure-waiting`, taken inside
//! [`Doorbell::subscribe`] — so before the subscriber's next campaign reads the lease — and
//! a ringer first tries that file's exclusive lock without waiting: granted, nobody waits,
//! and it lets go without ringing. A release that committed before a mark was taken was seen
//! by the campaign that follows the subscription; a newly taken mark also wakes its
//! subscriber once for any name, which then looks again. A mark is let go at the process's
//! next ring after its last subscriber is gone (until then others ring for nothing, which
//! costs only the ring).
//!
//! The bell only wakes; the database decides. A ring that is lost (the file removed, the watch
//! limit reached, a file system without inotify, two rings racing a truncation) costs a
//! follower one poll interval, never safety: it still campaigns on its renew interval.

use notify::{EventKind, RecursiveMode, Watcher};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::broadcast;

/// One process's watch on one database's bell, shared by every store open on that file.
pub(super) struct Doorbell {
    path: PathBuf,
    wake: broadcast::Sender<String>,
    _watcher: notify::RecommendedWatcher,
    /// `<file>-tenure-waiting`: the ringer's probe (its exclusive lock, tried and let go).
    probe: Mutex<std::fs::File>,
    /// This process's waiting mark (a shared lock on its own open of the same file), while it
    /// has subscribers.
    mark: Mutex<Option<std::fs::File>>,
    waiting_path: PathBuf,
}

/// How long the bell file may grow before a ringer empties it.
const MAX_BELL_BYTES: u64 = 64 * 1024;

/// The names rung since the watcher had read `read` bytes of the bell at `path`; [`ANY`] if
/// the file was emptied since (a name may have been missed). Leaves a line still being
/// written for the next event.
///
/// [`ANY`]: crate::changes::ANY
fn rung_since(path: &Path, read: &mut u64) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return vec![crate::changes::ANY.to_string()];
    };
    let len = file.metadata().map_or(0, |m| m.len());
    if len < *read {
        *read = len;
        return vec![crate::changes::ANY.to_string()];
    }
    let mut new = Vec::new();
    if file.seek(SeekFrom::Start(*read)).is_err() || file.read_to_end(&mut new).is_err() {
        return vec![crate::changes::ANY.to_string()];
    }
    let complete = new.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    *read += complete as u64;
    let mut names: Vec<String> = new[..complete]
        .split(|&b| b == b'\n')
        .map(|line| String::from_utf8_lossy(line).into_owned())
        .collect();
    // The empty piece after the last newline.
    names.pop();
    names
}

/// The bells this process watches, by path: one inotify instance per database file, however
/// many stores are open on it (the per-user limit on instances is small, often 128).
static OPEN: Mutex<Option<HashMap<PathBuf, Weak<Doorbell>>>> = Mutex::new(None);

impl Doorbell {
    /// The bell of the database file `database`, created if missing; `None` (logged) if it
    /// cannot be created or watched.
    pub(super) fn of(database: &Path) -> Option<Arc<Doorbell>> {
        let mut name = database.as_os_str().to_owned();
        name.push("-tenure-bell");
        let path = PathBuf::from(name);
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        let open = open.get_or_insert_with(HashMap::new);
        open.retain(|_, bell| bell.strong_count() > 0);
        if let Some(bell) = open.get(&path).and_then(Weak::upgrade) {
            return Some(bell);
        }
        match Doorbell::watch(path.clone()) {
            Ok(bell) => {
                let bell = Arc::new(bell);
                open.insert(path, Arc::downgrade(&bell));
                Some(bell)
            }
            Err(e) => {
                tracing::info!(
                    bell = %path.display(),
                    error = %e,
                    "no doorbell on this SQLite file: followers learn of releases by polling"
                );
                None
            }
        }
    }

    fn watch(path: PathBuf) -> Result<Doorbell, Box<dyn std::error::Error + Send + Sync>> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let mut read = file.metadata()?.len();
        let (wake, _) = broadcast::channel(1024);
        let sender = wake.clone();
        let reading = path.clone();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                if matches!(event, Ok(ref e) if matches!(e.kind, EventKind::Modify(_))) {
                    // Nobody listening is fine: the ring was for another process.
                    for name in rung_since(&reading, &mut read) {
                        let _ = sender.send(name);
                    }
                }
            })?;
        watcher.watch(&path, RecursiveMode::NonRecursive)?;
        let mut waiting = path.clone().into_os_string();
        waiting.push("-waiting");
        let waiting_path = PathBuf::from(waiting);
        let probe = Mutex::new(open_waiting(&waiting_path)?);
        Ok(Doorbell {
            path,
            wake,
            _watcher: watcher,
            probe,
            mark: Mutex::new(None),
            waiting_path,
        })
    }

    /// Whether some process holds a waiting mark (or it cannot tell: then yes). Lets go of
    /// this process's own mark first if nobody here subscribes any more.
    fn someone_waits(&self) -> bool {
        use rustix::fs::{flock, FlockOperation};
        if self.wake.receiver_count() == 0 {
            self.mark.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
        let probe = self.probe.lock().unwrap_or_else(|e| e.into_inner());
        match flock(&*probe, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                let _ = flock(&*probe, FlockOperation::Unlock);
                false
            }
            Err(_) => true,
        }
    }

    /// Rings for `name` (empty: a write that names no lease): every store watching this database wakes the
    /// followers of `name`. Best effort: one small append (atomic with `O_APPEND`).
    pub(super) fn ring(&self, name: &str) {
        use std::io::Write;
        if !self.someone_waits() {
            return;
        }
        let rung = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .and_then(|mut f| {
                f.write_all(format!("{name}\n").as_bytes())?;
                if f.metadata()?.len() > MAX_BELL_BYTES {
                    f.set_len(0)?;
                }
                Ok(())
            });
        if let Err(e) = rung {
            tracing::debug!(bell = %self.path.display(), error = %e, "could not ring the doorbell");
        }
    }

    /// The wake-ups from now on. Takes this process's waiting mark first if it holds none
    /// (then the new subscriber is woken once for any name: a release may have come just
    /// before the mark, unrung).
    pub(super) fn subscribe(&self) -> broadcast::Receiver<String> {
        let newly = {
            let mut mark = self.mark.lock().unwrap_or_else(|e| e.into_inner());
            let newly = mark.is_none();
            if newly {
                *mark = take_mark(&self.waiting_path);
            }
            newly
        };
        let receiver = self.wake.subscribe();
        if newly {
            let _ = self.wake.send(crate::changes::ANY.to_string());
        }
        receiver
    }
}

fn open_waiting(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}

/// A shared lock on the waiting file on an open of its own; `None` (logged: then rings are
/// sent only while another process waits) if it cannot be taken.
fn take_mark(path: &Path) -> Option<std::fs::File> {
    use rustix::fs::{flock, FlockOperation};
    let taken = open_waiting(path).and_then(|file| {
        flock(&file, FlockOperation::LockShared)
            .map(|()| file)
            .map_err(Into::into)
    });
    match taken {
        Ok(file) => Some(file),
        Err(e) => {
            tracing::info!(path = %path.display(), error = %e, "no waiting mark on this SQLite file: rings may not reach this process");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{rung_since, Doorbell};
    use crate::changes::ANY;
    use std::sync::Arc;
    use std::time::Duration;

    async fn next(rx: &mut tokio::sync::broadcast::Receiver<String>) -> String {
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        got.expect("woken within 5 s").unwrap()
    }

    #[tokio::test]
    async fn a_ring_names_its_lease_to_every_watcher_of_the_file_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let bell = Doorbell::of(&dir.path().join("app.db")).expect("a bell");
        let same = Doorbell::of(&dir.path().join("app.db")).expect("the same bell");
        assert!(Arc::ptr_eq(&bell, &same), "one watch per file and process");
        let other = Doorbell::of(&dir.path().join("other.db")).expect("another bell");
        let (mut woken, mut elsewhere) = (same.subscribe(), other.subscribe());
        // A new mark wakes its subscribers once for any name.
        assert_eq!(woken.try_recv().unwrap(), ANY);
        assert_eq!(elsewhere.try_recv().unwrap(), ANY);
        bell.ring("billing/leader");
        assert_eq!(next(&mut woken).await, "billing/leader");
        bell.ring("");
        assert_eq!(next(&mut woken).await, "", "a write that names no lease");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            elsewhere.try_recv().is_err(),
            "another file's bell stays quiet"
        );
    }

    #[tokio::test]
    async fn a_bell_rings_only_while_someone_waits() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("quiet.db");
        let bell = Doorbell::of(&db).expect("a bell");
        bell.ring("nobody-waits");
        assert_eq!(std::fs::metadata(&bell.path).unwrap().len(), 0, "not rung");
        // A waiter in another process: its shared mark on its own open of the file.
        let other = super::take_mark(&bell.waiting_path).expect("a mark");
        bell.ring("someone-waits");
        assert_eq!(
            std::fs::read_to_string(&bell.path).unwrap(),
            "someone-waits\n"
        );
        drop(other);
        bell.ring("gone");
        assert_eq!(
            std::fs::read_to_string(&bell.path).unwrap(),
            "someone-waits\n"
        );
        // A subscriber of this process marks it; once it is gone the mark goes at the next ring.
        let rx = bell.subscribe();
        bell.ring("here");
        assert!(std::fs::read_to_string(&bell.path)
            .unwrap()
            .ends_with("here\n"));
        drop(rx);
        bell.ring("left");
        assert!(!std::fs::read_to_string(&bell.path)
            .unwrap()
            .contains("left"));
    }

    #[test]
    fn reading_the_bell_keeps_a_partial_line_and_wakes_all_after_a_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bell");
        std::fs::write(&path, "a\nb\nha").unwrap();
        let mut read = 0;
        assert_eq!(rung_since(&path, &mut read), ["a", "b"]);
        assert_eq!(read, 4);
        std::fs::write(&path, "a\nb\nhalf\n\n").unwrap();
        assert_eq!(rung_since(&path, &mut read), ["half", ""]);
        assert_eq!(rung_since(&path, &mut read), Vec::<String>::new());
        std::fs::write(&path, "c\n").unwrap();
        assert_eq!(rung_since(&path, &mut read), [ANY], "emptied: maybe missed");
        assert_eq!(read, 2);
    }

    #[test]
    fn a_ringer_empties_a_full_bell() {
        let dir = tempfile::tempdir().unwrap();
        let bell = Doorbell::of(&dir.path().join("full.db")).expect("a bell");
        let _waiting = bell.subscribe();
        let name = "x".repeat(100);
        for _ in 0..700 {
            bell.ring(&name);
        }
        let len = std::fs::metadata(&bell.path).unwrap().len();
        assert!(len <= super::MAX_BELL_BYTES, "{len} bytes");
    }
}
