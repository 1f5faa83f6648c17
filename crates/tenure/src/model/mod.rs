//! The lease rules, with no IO: [`decide`] maps (database now, current row, operation) to the
//! row to write, the history event to append and what happened.
//!
//! Every backend runs exactly this function inside a transaction that holds the row's lock and
//! read `now` from the database's clock after taking it, so the rules exist once. The
//! model-based test (`tests/model.rs`) keeps its own copy of the state in memory and checks
//! that each backend's stored rows and answers agree with this function for random sequences
//! of operations and real expiries.

use std::fmt;

/// A point on the database server's clock, in microseconds since the Unix epoch.
///
/// It is only ever read from the database; tenure never builds one from the local clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DbTime(pub i64);

impl DbTime {
    /// This instant plus `ms` milliseconds.
    pub fn plus_ms(self, ms: u64) -> DbTime {
        DbTime(self.0.saturating_add((ms as i64).saturating_mul(1000)))
    }

    /// Milliseconds from `earlier` to `self`, or 0 when `earlier` is later.
    pub fn ms_since(self, earlier: DbTime) -> u64 {
        (self.0.saturating_sub(earlier.0)).max(0) as u64 / 1000
    }

    /// As a chrono UTC timestamp, for display.
    pub fn to_utc(self) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::from_timestamp_micros(self.0).unwrap_or_default()
    }
}

impl fmt::Display for DbTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_utc().format("%Y-%m-%d %H:%M:%S%.6fZ"))
    }
}

/// One row of `tenure_lease`: the state of one name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The election or lock.
    pub name: String,
    /// Who holds it; `None` when vacant. A holder whose `expires_at` has passed no longer leads.
    pub holder: Option<String>,
    /// The fencing token of the latest tenure; 0 before the first one.
    pub term: u64,
    /// When the latest tenure began.
    pub acquired_at: DbTime,
    /// When the holder last renewed (or acquired).
    pub renewed_at: DbTime,
    /// Until when the holder leads; after a release or demote, until when nobody may start.
    pub expires_at: DbTime,
    /// The ttl the holder last asked for.
    pub ttl_ms: u64,
    /// The holder's "body": a small text (e.g. its address) so that others can find it.
    pub metadata: Option<String>,
    /// A pending graceful handover: the holder steps down, only this candidate may acquire.
    pub handover_to: Option<String>,
    /// Maintenance: the holder steps down and nobody acquires until resumed.
    pub paused: bool,
}

impl Lease {
    /// The holder, if it still leads at `now`.
    pub fn live_holder(&self, now: DbTime) -> Option<&str> {
        self.holder.as_deref().filter(|_| self.expires_at > now)
    }

    /// Milliseconds left until `expires_at`, 0 once passed.
    pub fn remaining_ms(&self, now: DbTime) -> u64 {
        self.expires_at.ms_since(now)
    }

    /// Whether a pending handover target still has the lease reserved at `now`: until one ttl
    /// after the lease became free.
    fn reserved_for_other(&self, me: &str, now: DbTime) -> bool {
        self.handover_pending(now) && self.handover_to.as_deref() != Some(me)
    }

    /// Whether a handover was asked for and has not lapsed (one ttl after the lease became
    /// free, or after it was asked for if the lease was free then).
    pub fn handover_pending(&self, now: DbTime) -> bool {
        self.handover_to.is_some() && self.expires_at.plus_ms(self.ttl_ms) > now
    }
}

/// An operation on one name, decided atomically at one database instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Acquire, renew or step down (DESIGN.md's `campaign`).
    Campaign {
        candidate: String,
        ttl_ms: u64,
        metadata: Option<String>,
    },
    /// Renew the tenure `term` of `candidate` with the row's own ttl, never acquiring: the
    /// keep-alive of held locks, which backends run for many leases in one statement.
    Renew { candidate: String, term: u64 },
    /// Give up the tenure `term` of `candidate`; nobody may start before `acquired_at + at_least`.
    Release {
        candidate: String,
        term: u64,
        at_least_ms: u64,
    },
    /// Force a re-election. Keeps `expires_at` (lock-delay) unless `immediate`.
    Demote { immediate: bool },
    /// Force a given leader: graceful by default, at once (and unsafe without fencing) if
    /// `immediate`.
    Handover { to: String, immediate: bool },
    /// Maintenance stop: the holder steps down at its next renew, nobody acquires.
    Pause,
    /// End a pause.
    Resume,
}

/// Why a holder stepped down when it tried to renew.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepDownReason {
    /// The name is paused.
    Paused,
    /// An operator asked for a handover to this candidate.
    HandoverTo(String),
}

/// What an operation did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// The candidate began a new tenure (term raised by one).
    Acquired {
        /// The previous holder whose lease had expired, if any.
        took_over_from: Option<String>,
    },
    /// The holder extended its tenure.
    Renewed,
    /// The holder must step down (pause or handover). Nothing was written: the holder stops
    /// renewing, stops its work, and then releases, so that nobody starts while it still runs.
    SteppedDown(StepDownReason),
    /// The tenure was released.
    Released,
    /// A release by someone who is not the holder of that term: nothing changed.
    NotHolder,
    /// Someone else leads, or the lease is blocked (lock-delay, pause, handover): nothing changed.
    Unavailable,
    /// An admin operation took effect.
    Demoted,
    /// A graceful handover was recorded.
    HandoverRequested,
    /// An immediate handover installed the target with a new term.
    Forced,
    /// The name was paused.
    Paused,
    /// The name was resumed.
    Resumed,
    /// An admin operation had nothing to do (e.g. resume of a name not paused).
    NoChange,
    /// An admin operation named a name that has never been used.
    UnknownName,
}

impl Effect {
    /// A stable snake_case word for programs (`--json`, the HTTP API).
    pub fn as_str(&self) -> &'static str {
        match self {
            Effect::Acquired { .. } => "acquired",
            Effect::Renewed => "renewed",
            Effect::SteppedDown(_) => "stepped_down",
            Effect::Released => "released",
            Effect::NotHolder => "not_holder",
            Effect::Unavailable => "unavailable",
            Effect::Demoted => "demoted",
            Effect::HandoverRequested => "handover_requested",
            Effect::Forced => "forced",
            Effect::Paused => "paused",
            Effect::Resumed => "resumed",
            Effect::NoChange => "no_change",
            Effect::UnknownName => "unknown_name",
        }
    }
}

/// A transition worth recording in `tenure_history`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Acquired,
    Released,
    TakenOverExpired,
    Demoted,
    HandedOver,
    Forced,
    Paused,
    Resumed,
}

impl EventKind {
    /// The word stored in the `event` column.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Acquired => "acquired",
            EventKind::Released => "released",
            EventKind::TakenOverExpired => "taken_over_expired",
            EventKind::Demoted => "demoted",
            EventKind::HandedOver => "handed_over",
            EventKind::Forced => "forced",
            EventKind::Paused => "paused",
            EventKind::Resumed => "resumed",
        }
    }
}

/// A history row to append, minus the actor (who asked) which the caller knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub term: u64,
    pub holder: Option<String>,
    pub detail: String,
}

/// The outcome of [`decide`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The row after the operation (`None` only if there was none and there still is none).
    pub lease: Option<Lease>,
    /// Whether `lease` differs from the stored row and must be written.
    pub write: bool,
    /// What to append to the history, if anything.
    pub event: Option<Event>,
    /// What happened.
    pub effect: Effect,
}

/// Applies `op` to the row `current` of `name` at the database instant `now`.
pub fn decide(now: DbTime, name: &str, current: Option<&Lease>, op: &Op) -> Decision {
    let mut decision = decide_row(now, name, current, op);
    // A release or demote empties the row; its history event names who gave the lease up.
    if let Some(event) = &mut decision.event {
        if matches!(event.kind, EventKind::Released | EventKind::Demoted) {
            event.holder = current.and_then(|row| row.holder.clone());
        }
    }
    decision
}

fn decide_row(now: DbTime, name: &str, current: Option<&Lease>, op: &Op) -> Decision {
    let unchanged = |effect| Decision {
        lease: current.cloned(),
        write: false,
        event: None,
        effect,
    };
    let changed = |lease: Lease, kind: EventKind, detail: String, effect| Decision {
        event: Some(Event {
            kind,
            term: lease.term,
            holder: lease.holder.clone(),
            detail,
        }),
        lease: Some(lease),
        write: true,
        effect,
    };

    match op {
        Op::Campaign {
            candidate,
            ttl_ms,
            metadata,
        } => {
            let Some(row) = current else {
                let lease = new_tenure(name, 1, candidate, *ttl_ms, metadata, now);
                return changed(
                    lease,
                    EventKind::Acquired,
                    String::new(),
                    Effect::Acquired {
                        took_over_from: None,
                    },
                );
            };
            campaign(now, row, candidate, *ttl_ms, metadata, unchanged, changed)
        }
        Op::Renew { candidate, term } => match current {
            Some(row) if row.live_holder(now) == Some(candidate) && row.term == *term => {
                if row.paused {
                    return unchanged(Effect::SteppedDown(StepDownReason::Paused));
                }
                if let Some(target) = row.handover_to.as_ref().filter(|t| *t != candidate) {
                    return unchanged(Effect::SteppedDown(StepDownReason::HandoverTo(
                        target.clone(),
                    )));
                }
                Decision {
                    lease: Some(Lease {
                        renewed_at: now,
                        expires_at: now.plus_ms(row.ttl_ms),
                        handover_to: None,
                        ..row.clone()
                    }),
                    write: true,
                    event: None,
                    effect: Effect::Renewed,
                }
            }
            _ => unchanged(Effect::NotHolder),
        },
        Op::Release {
            candidate,
            term,
            at_least_ms,
        } => match current {
            Some(row) if row.holder.as_deref() == Some(candidate) && row.term == *term => {
                let lease = vacate(row, now, *at_least_ms);
                changed(lease, EventKind::Released, String::new(), Effect::Released)
            }
            _ => unchanged(Effect::NotHolder),
        },
        Op::Demote { immediate } => {
            let Some(row) = current else {
                return unchanged(Effect::UnknownName);
            };
            let expires_at = if *immediate {
                row.expires_at.min(now)
            } else {
                row.expires_at
            };
            if row.holder.is_none() && expires_at == row.expires_at {
                return unchanged(Effect::NoChange);
            }
            let detail = match (&row.holder, immediate) {
                (Some(h), false) => format!("{h} demoted; nobody starts before {expires_at}"),
                (Some(h), true) => format!("{h} demoted immediately (unsafe without fencing)"),
                (None, _) => "lock-delay cut short (unsafe without fencing)".to_string(),
            };
            let lease = Lease {
                holder: None,
                expires_at,
                ..row.clone()
            };
            changed(lease, EventKind::Demoted, detail, Effect::Demoted)
        }
        Op::Handover { to, immediate } => {
            // A name nobody has held (only paused) has no ttl to reserve it or install with.
            let Some(row) = current.filter(|row| row.term > 0) else {
                return unchanged(Effect::UnknownName);
            };
            if *immediate {
                let previous = row.holder.clone().unwrap_or_default();
                let lease = Lease {
                    holder: Some(to.clone()),
                    term: row.term + 1,
                    acquired_at: now,
                    renewed_at: now,
                    expires_at: now.plus_ms(row.ttl_ms),
                    metadata: None,
                    handover_to: None,
                    ..row.clone()
                };
                let detail = format!("forced from '{previous}' (unsafe unless writes are fenced)");
                return changed(lease, EventKind::Forced, detail, Effect::Forced);
            }
            let pending = row.handover_to.as_ref() == Some(to) && row.handover_pending(now);
            if row.live_holder(now) == Some(to.as_str()) || pending {
                return unchanged(Effect::NoChange);
            }
            // Without a live holder the reservation must count from now, not from an old expiry.
            let expires_at = if row.live_holder(now).is_some() {
                row.expires_at
            } else {
                row.expires_at.max(now)
            };
            let lease = Lease {
                handover_to: Some(to.clone()),
                expires_at,
                ..row.clone()
            };
            let detail = format!("handover to '{to}' requested");
            changed(
                lease,
                EventKind::HandedOver,
                detail,
                Effect::HandoverRequested,
            )
        }
        Op::Pause => match current {
            Some(row) if row.paused => unchanged(Effect::NoChange),
            Some(row) => {
                let lease = Lease {
                    paused: true,
                    ..row.clone()
                };
                changed(lease, EventKind::Paused, String::new(), Effect::Paused)
            }
            None => {
                let lease = Lease {
                    name: name.to_string(),
                    holder: None,
                    term: 0,
                    acquired_at: now,
                    renewed_at: now,
                    expires_at: now,
                    ttl_ms: 0,
                    metadata: None,
                    handover_to: None,
                    paused: true,
                };
                changed(lease, EventKind::Paused, String::new(), Effect::Paused)
            }
        },
        Op::Resume => match current {
            None => unchanged(Effect::UnknownName),
            Some(row) if !row.paused => unchanged(Effect::NoChange),
            Some(row) => {
                let lease = Lease {
                    paused: false,
                    ..row.clone()
                };
                changed(lease, EventKind::Resumed, String::new(), Effect::Resumed)
            }
        },
    }
}

fn campaign(
    now: DbTime,
    row: &Lease,
    me: &str,
    ttl_ms: u64,
    metadata: &Option<String>,
    unchanged: impl Fn(Effect) -> Decision,
    changed: impl Fn(Lease, EventKind, String, Effect) -> Decision,
) -> Decision {
    if row.live_holder(now) == Some(me) {
        let reason = if row.paused {
            Some(StepDownReason::Paused)
        } else {
            match &row.handover_to {
                Some(target) if target != me => Some(StepDownReason::HandoverTo(target.clone())),
                _ => None,
            }
        };
        if let Some(reason) = reason {
            // No write: the holder stops renewing and releases once its work has stopped, so
            // nobody (not even a handover target) can start while that work may still run.
            return unchanged(Effect::SteppedDown(reason));
        }
        let lease = Lease {
            renewed_at: now,
            expires_at: now.plus_ms(ttl_ms),
            ttl_ms,
            metadata: metadata.clone(),
            handover_to: None,
            ..row.clone()
        };
        return Decision {
            lease: Some(lease),
            write: true,
            event: None,
            effect: Effect::Renewed,
        };
    }
    if row.expires_at > now || row.paused || row.reserved_for_other(me, now) {
        return unchanged(Effect::Unavailable);
    }
    let lease = new_tenure(&row.name, row.term + 1, me, ttl_ms, metadata, now);
    let (kind, detail) = match (&row.holder, &row.handover_to) {
        (Some(previous), _) => (
            EventKind::TakenOverExpired,
            format!("lease of '{previous}' (term {}) had expired", row.term),
        ),
        (None, Some(target)) if target == me => (EventKind::Acquired, "by handover".to_string()),
        (None, _) => (EventKind::Acquired, String::new()),
    };
    let took_over_from = row.holder.clone();
    changed(lease, kind, detail, Effect::Acquired { took_over_from })
}

fn new_tenure(
    name: &str,
    term: u64,
    me: &str,
    ttl_ms: u64,
    metadata: &Option<String>,
    now: DbTime,
) -> Lease {
    Lease {
        name: name.to_string(),
        holder: Some(me.to_string()),
        term,
        acquired_at: now,
        renewed_at: now,
        expires_at: now.plus_ms(ttl_ms),
        ttl_ms,
        metadata: metadata.clone(),
        handover_to: None,
        paused: false,
    }
}

/// The row after its holder gives it up: nobody may start before `acquired_at + at_least`.
fn vacate(row: &Lease, now: DbTime, at_least_ms: u64) -> Lease {
    Lease {
        holder: None,
        expires_at: now.max(row.acquired_at.plus_ms(at_least_ms)),
        ..row.clone()
    }
}

#[cfg(test)]
mod tests;
