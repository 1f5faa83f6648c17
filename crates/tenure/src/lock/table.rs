//! What a process knows about its locks: the tenures it holds, and per name the terms it
//! handed out and the one it still has to give back (the per-term ledger: a term goes to at
//! most one guard, ever, and a term whose belief ended stays *stale* until its release is
//! known to have landed).

use super::options::GiveBack;
use crate::belief::{Belief, Ledger, View};
use crate::config::Timing;
use crate::telemetry::{Ended, Role, Seen};
use std::collections::HashMap;
use tokio::time::Instant;

/// One held lock, as the table sees it.
pub(super) struct Held {
    pub(super) belief: Belief,
    pub(super) timing: Timing,
    pub(super) keep_alive: bool,
    pub(super) give_back: GiveBack,
}

/// A term of ours to release before the name is campaigned for again.
pub(super) struct Terms {
    pub(super) ledger: Ledger,
    /// How the stale term is given back.
    pub(super) give_back: GiveBack,
}

/// Everything a process knows about its locks.
#[derive(Default)]
pub(super) struct Table {
    pub(super) held: HashMap<String, Held>,
    /// Per name: the terms handed out and the stale one, while there is one.
    pub(super) terms: HashMap<String, Terms>,
    /// Terms kept with `forget`: the next attempt for the name succeeds them (election mode),
    /// until the local instant at which they expire.
    pub(super) kept: HashMap<String, (u64, Instant)>,
}

impl Table {
    /// Ends the belief of `name` in `term`, `why`, if it is the one held: it becomes stale
    /// until its release lands.
    pub(super) fn end(&mut self, name: &str, term: u64, why: Ended) {
        if self.held.get(name).is_some_and(|h| h.belief.term() == term) {
            let held = self.held.remove(name).expect("checked");
            held.belief.end(why);
            self.mark_stale(name, term, held.give_back);
        }
    }

    /// Starts the belief in a newly granted `term` of `name`, granted by a campaign `sent`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn hand_out(
        &mut self,
        name: &str,
        term: u64,
        sent: Instant,
        deadline: Instant,
        timing: Timing,
        keep_alive: bool,
        give_back: GiveBack,
    ) -> View {
        if let Some(older) = self.held.get(name).map(|h| h.belief.term()) {
            // The database moved past a term this table still holds: that belief is over.
            self.end(name, older, Ended::Replaced);
        }
        let terms = self.terms.entry(name.to_string()).or_insert_with(|| Terms {
            ledger: Ledger::default(),
            give_back,
        });
        terms.ledger.handed_out(term);
        let seen = Seen::start(name, Role::Lock, term, sent, &timing);
        let (belief, view) = Belief::new(term, deadline, seen);
        self.held.insert(
            name.to_string(),
            Held {
                belief,
                timing,
                keep_alive,
                give_back,
            },
        );
        view
    }

    pub(super) fn mark_stale(&mut self, name: &str, term: u64, give_back: GiveBack) {
        let entry = self.terms.entry(name.to_string()).or_insert_with(|| Terms {
            ledger: Ledger::default(),
            give_back,
        });
        entry.ledger.ended(term);
        entry.give_back = give_back;
    }

    /// Records that `term` of `name` is no longer ours in the database.
    pub(super) fn gone(&mut self, name: &str, term: u64) {
        if let Some(t) = self.terms.get_mut(name) {
            t.ledger.gone(term);
            if t.ledger.is_idle() && !self.held.contains_key(name) {
                self.terms.remove(name);
            }
        }
    }

    pub(super) fn stale(&self, name: &str) -> Option<(u64, GiveBack)> {
        let t = self.terms.get(name)?;
        t.ledger.stale().map(|term| (term, t.give_back))
    }
}
