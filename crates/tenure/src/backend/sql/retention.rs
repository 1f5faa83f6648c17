//! When old history is pruned: not at every event, so that a lock taken and released in a loop
//! does not pay a `DELETE` each time.

use crate::model::{Event, EventKind};

/// A name's history older than the retention is deleted at every this-many-th tenure of it (and
/// at every administrative event), not at every event: a lock taken and released in a loop
/// does not pay a `DELETE` each time, and a name keeps at most this many tenures' events
/// beyond the retention.
const PRUNE_EVERY_TERMS: u64 = 64;

/// Whether a tenure with this term, once acquired, prunes its name's old history.
pub(crate) fn acquisition_prunes(term: u64) -> bool {
    term.is_multiple_of(PRUNE_EVERY_TERMS)
}

/// Whether writing `event` also prunes its name's old history.
pub(crate) fn prunes_history(event: &Event) -> bool {
    match event.kind {
        EventKind::Released => false,
        EventKind::Acquired | EventKind::TakenOverExpired => acquisition_prunes(event.term),
        EventKind::Demoted
        | EventKind::HandedOver
        | EventKind::Forced
        | EventKind::Paused
        | EventKind::Resumed => true,
    }
}
