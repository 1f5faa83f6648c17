//! What tenure says about Galera (issue 18): on a Galera node it warns at connect that every
//! process must write through one node, and when its own transaction is aborted by a write
//! replicated from another node it warns that the writes are spread across nodes.
//!
//! - `galera-spread`: the lock workload (2 locks, a semaphore of 2) with each tenure node on its
//!   own Galera member, not through HAProxy: the premise is broken on purpose, so the checker's
//!   invariants are not asserted here; asserted is that every node warns at connect and that a
//!   node warns of spread writes within [`SPREAD_WITHIN`].
//! - every other Galera scenario (through HAProxy) asserts the connect warning of every node and
//!   reports how many warned of spread writes.

use super::database::Database;
use super::scenario::HaOutcome;
use crate::dbserver;
use crate::runner::cluster::Cluster;
use std::time::Duration;
use tokio::time::sleep;

/// What tenure logs at connect on a Galera node (`tenure::backend::mysql::galera`).
pub const CONNECT_WARNING: &str = "is a Galera node";
/// What tenure logs when a write replicated from another node aborted its transaction.
pub const SPREAD_WARNING: &str = "spread across Galera nodes";
/// How long the spread scenario waits for a node to warn of spread writes.
pub const SPREAD_WITHIN: Duration = Duration::from_secs(60);

/// How many of the cluster's node incarnations logged each warning, of how many.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Warned {
    pub nodes: usize,
    pub at_connect: usize,
    pub spread: usize,
}

/// Reads every node incarnation's log (`<id>.log` in the cluster's directory).
pub fn warned(c: &Cluster) -> Warned {
    let mut w = Warned::default();
    for node in &c.nodes {
        let log =
            std::fs::read_to_string(c.dir.join(format!("{}.log", node.id))).unwrap_or_default();
        w.nodes += 1;
        w.at_connect += usize::from(log.contains(CONNECT_WARNING));
        w.spread += usize::from(log.contains(SPREAD_WARNING));
    }
    w
}

/// The notes on `w`: an `error:` unless every node warned at connect.
pub fn connect_notes(w: &Warned) -> Vec<String> {
    let mut notes = vec![format!(
        "Galera warnings: {} of {} nodes at connect, {} of spread writes",
        w.at_connect, w.nodes, w.spread
    )];
    if w.at_connect < w.nodes {
        notes.push(format!(
            "error: {} of {} nodes did not say at connect that the server is a Galera node",
            w.nodes - w.at_connect,
            w.nodes
        ));
    }
    notes
}

/// Runs the spread scenario on `c` (prepared, no node started): node `i` writes through
/// member `i mod n`. Returns the nodes, when the spread began and its target.
pub async fn drive(
    mut c: Cluster,
    db: &Database,
    outcome: &mut HaOutcome,
) -> Result<(Cluster, u64, String), String> {
    let Database::Galera(g) = db else {
        return Err("the spread scenario needs a Galera cluster".into());
    };
    let began = c.nemesis.fault_start("spread", "*");
    for slot in 0..c.settings.nodes {
        c.url = g.direct_url(slot % g.nodes.len(), dbserver::DATABASE);
        c.spawn(slot)?;
    }
    let until = tokio::time::Instant::now() + SPREAD_WITHIN;
    while warned(&c).spread == 0 && tokio::time::Instant::now() < until {
        sleep(Duration::from_millis(250)).await;
    }
    let took = crate::clock::between(began, crate::clock::now_ns());
    c.nemesis.fault_end("spread", "*");
    let w = warned(&c);
    outcome.notes.extend(connect_notes(&w));
    outcome.notes.push(if w.spread > 0 {
        format!(
            "a node warned of writes spread across Galera nodes {:.1} s after the nodes started",
            took.as_secs_f64()
        )
    } else {
        format!("error: no node warned of spread writes within {SPREAD_WITHIN:?}")
    });
    Ok((c, began, "*".into()))
}

#[cfg(test)]
mod tests {
    use super::{connect_notes, Warned};

    #[test]
    fn a_node_that_did_not_warn_at_connect_fails_the_scenario() {
        let all = Warned {
            nodes: 3,
            at_connect: 3,
            spread: 0,
        };
        assert!(!connect_notes(&all).iter().any(|n| n.starts_with("error")));
        let one_silent = Warned {
            nodes: 4,
            at_connect: 3,
            spread: 1,
        };
        let notes = connect_notes(&one_silent);
        assert!(notes[0].contains("3 of 4 nodes at connect, 1 of spread"));
        assert!(notes.iter().any(|n| n.starts_with("error: 1 of 4 nodes")));
    }
}
