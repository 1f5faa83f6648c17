//! The recorded history: one JSON object per line, appended by each node to its own file and by
//! the runner (the nemesis) to its own, with `CLOCK_MONOTONIC` timestamps so they merge.

use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::Mutex;

/// Which protected resource an operation wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// A register written only inside a transaction that `fence`d the writer's term.
    Fenced,
    /// The negative control: the same register written on the node's belief alone, after a
    /// short stretch of "work", as the blog-post recipes do.
    Unfenced,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Kind {
    /// The node process started.
    Start { pid: u32 },
    /// A campaign was sent to the database.
    CampaignSent,
    /// A campaign was answered: the effect and the lease's term.
    CampaignAnswered { effect: String, term: u64 },
    /// A campaign failed: the error as the elector logged it (`campaign failed`).
    CampaignFailed { error: String },
    /// The node learned it leads with `term`; its belief lasts until `deadline` (monotonic ns).
    /// `holder` is the holder id the database knows it by, when that is not the node's own
    /// name (a lock guard of a process, or a candidate id shared by several nodes).
    Gained {
        term: u64,
        deadline: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        holder: Option<String>,
    },
    /// A renewal moved the deadline.
    Renewed { term: u64, deadline: u64 },
    /// The tenure ended locally.
    SteppedDown { term: u64 },
    /// A protected operation was issued under `term` (`deadline` as the node knew it then).
    OpIssued {
        resource: Resource,
        term: u64,
        seq: u64,
        deadline: u64,
    },
    /// The resource accepted it; `prev_*` is the write it replaced.
    OpAccepted {
        resource: Resource,
        term: u64,
        seq: u64,
        prev_node: String,
        prev_term: u64,
        prev_seq: u64,
    },
    /// The resource (or the database) refused it.
    OpRejected {
        resource: Resource,
        term: u64,
        seq: u64,
        error: String,
    },
    /// The nemesis began a fault (`target` is a node id, or `*`).
    FaultStart { fault: String, target: String },
    /// The nemesis ended a fault.
    FaultEnd { fault: String, target: String },
}

/// One line of the history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// `CLOCK_MONOTONIC` nanoseconds.
    pub t: u64,
    /// The wall clock as the writing process saw it (milliseconds since the epoch).
    pub wall_ms: i64,
    /// The node id, or `nemesis`; in a lock workload, the lock guard (`n1.1/t2#5`: node, task,
    /// acquisition).
    pub node: String,
    /// The lock (lease) name the event is about, in a lock workload; `None` for the elector's
    /// one election name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<String>,
    #[serde(flatten)]
    pub kind: Kind,
}

/// Appends events to a file, one `write` per line, so that a SIGKILL loses at most the line
/// being written (which the reader then skips).
pub struct EventLog {
    node: String,
    file: Mutex<File>,
}

impl EventLog {
    pub fn create(path: &Path, node: &str) -> std::io::Result<EventLog> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(EventLog {
            node: node.to_string(),
            file: Mutex::new(file),
        })
    }

    /// Records `kind` now.
    pub fn record(&self, kind: Kind) {
        self.record_at(crate::clock::now_ns(), kind);
    }

    /// Records `kind` at `t` (monotonic ns).
    pub fn record_at(&self, t: u64, kind: Kind) {
        self.write(Event {
            t,
            wall_ms: crate::clock::wall_ms(),
            node: self.node.clone(),
            lock: None,
            kind,
        });
    }

    /// Records that the nemesis began `fault` on `target` now; returns that instant.
    pub fn fault_start(&self, fault: &str, target: &str) -> u64 {
        let t = crate::clock::now_ns();
        self.record_at(
            t,
            Kind::FaultStart {
                fault: fault.into(),
                target: target.into(),
            },
        );
        t
    }

    /// Records that the nemesis ended `fault` on `target` now.
    pub fn fault_end(&self, fault: &str, target: &str) {
        self.record(Kind::FaultEnd {
            fault: fault.into(),
            target: target.into(),
        });
    }

    /// Records `kind` now, about `lock`, by `guard` (a lock guard of this node).
    pub fn record_lock(&self, guard: &str, lock: &str, kind: Kind) {
        self.write(Event {
            t: crate::clock::now_ns(),
            wall_ms: crate::clock::wall_ms(),
            node: guard.to_string(),
            lock: Some(lock.to_string()),
            kind,
        });
    }

    fn write(&self, event: Event) {
        let mut line = serde_json::to_vec(&event).expect("events serialize");
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        // A history with holes would make the checker's verdicts worthless.
        file.write_all(&line).expect("the event log is writable");
    }
}

/// Reads one event file; a torn last line (the process was killed mid-write) is skipped.
pub fn read(path: &Path) -> std::io::Result<Vec<Event>> {
    let mut events = Vec::new();
    for line in BufReader::new(File::open(path)?).lines() {
        if let Ok(event) = serde_json::from_str::<Event>(&line?) {
            events.push(event);
        }
    }
    Ok(events)
}

/// Merges histories into one, ordered by time.
pub fn merge(histories: impl IntoIterator<Item = Vec<Event>>) -> Vec<Event> {
    let mut all: Vec<Event> = histories.into_iter().flatten().collect();
    all.sort_by_key(|e| e.t);
    all
}
