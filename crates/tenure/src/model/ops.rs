//! One function per [`Op`](super::Op): each maps (database now, current row, the operation's
//! arguments) to the [`Decision`]. [`decide`](super::decide) picks the function and then names,
//! in the history event, who gave the lease up.

use super::{
    DbTime, Decision, Effect, Epoch, Event, EventKind, Lease, Purpose, Standing, StepDownReason,
};

/// A campaign's arguments (and a succession's: `term` is the one it ends).
pub(super) struct Ask<'a> {
    pub(super) me: &'a str,
    pub(super) term: Option<u64>,
    pub(super) ttl_ms: u64,
    pub(super) metadata: &'a Option<String>,
    pub(super) purpose: Purpose,
    /// The epoch a new term is minted in.
    pub(super) epoch: Epoch,
    /// Its standing among the candidates of the name, if it has one.
    pub(super) standing: Option<&'a Standing<'a>>,
}

/// Acquire, renew or step down; see [`Op::Campaign`](super::Op::Campaign).
pub(super) fn campaign(
    now: DbTime,
    name: &str,
    current: Option<&Lease>,
    ask: &Ask<'_>,
) -> Decision {
    let me = ask.me;
    let waits = ask.standing.and_then(|s| s.holds_off(now));
    let Some(row) = current else {
        if waits.is_some() {
            return unchanged(current, Effect::Unavailable);
        }
        let Some(term) = ask.epoch.next_term(0) else {
            return unchanged(current, Effect::TermsExhausted);
        };
        let lease = new_tenure(name, term, me, ask.ttl_ms, ask.metadata, now);
        let decision = changed(
            lease,
            EventKind::Acquired,
            String::new(),
            Effect::Acquired {
                took_over_from: None,
            },
        );
        return acquisition(decision, ask.purpose, true);
    };
    if row.live_holder(now) == Some(me) {
        if row.forced_grant_pending() && !row.paused {
            // An immediate handover granted this tenure to `me`: adopted once, by this
            // campaign. The grant's `forced` event is its history.
            let lease = renewed(row, now, ask);
            return Decision {
                lease: Some(lease),
                write: true,
                event: None,
                wake: false,
                effect: Effect::Acquired {
                    took_over_from: None,
                },
            };
        }
        if ask.term != Some(row.term) || row.forced_grant_pending() {
            // Held, by another incarnation or task with the same holder id, or by a tenure of
            // ours that ended (a release on its way): never a renewal.
            return unchanged(current, Effect::Unavailable);
        }
        if let Some(reason) = step_down_reason(row, me) {
            // No write: the holder stops renewing and releases once its work has stopped, so
            // nobody (not even a handover target) can start while that work may still run.
            return unchanged(current, Effect::SteppedDown(reason));
        }
        if let Some(standing) = ask.standing {
            if let Some(better) = standing.preferred(now, row.term, ask.epoch) {
                return hand_over_to_better(row, me, standing, better, now);
            }
        }
        return Decision {
            lease: Some(renewed(row, now, ask)),
            write: true,
            event: None,
            wake: false,
            effect: Effect::Renewed,
        };
    }
    // A reservation whose target has stopped campaigning has lapsed for a campaign that sees
    // the registry.
    let abandoned = |target: &str| ask.standing.is_some_and(|s| s.abandoned(target, now));
    let reserved =
        row.reserved_for_other(me, now) && !row.handover_to.as_deref().is_some_and(abandoned);
    if !row.expires_at.ended_by(now) || row.paused || reserved {
        return unchanged(current, Effect::Unavailable);
    }
    // A better live candidate takes it at its next campaign (a handover's target never waits).
    let reserved_for_me = row.handover_pending(now) && row.handover_to.as_deref() == Some(me);
    if waits.is_some() && !reserved_for_me {
        return unchanged(current, Effect::Unavailable);
    }
    let Some(term) = ask.epoch.next_term(row.term) else {
        return unchanged(current, Effect::TermsExhausted);
    };
    let lease = new_tenure(&row.name, term, me, ask.ttl_ms, ask.metadata, now);
    let (kind, detail, uncontested) = match (&row.holder, &row.handover_to) {
        (Some(previous), _) => (
            EventKind::TakenOverExpired,
            format!("lease of '{previous}' (term {}) had expired", row.term),
            false,
        ),
        (None, Some(target)) if target == me => {
            (EventKind::Acquired, "by handover".to_string(), false)
        }
        (None, _) => (EventKind::Acquired, String::new(), true),
    };
    let took_over_from = row.holder.clone();
    let decision = changed(lease, kind, detail, Effect::Acquired { took_over_from });
    acquisition(decision, ask.purpose, uncontested)
}

/// The live holder of `ask.term` begins the next tenure itself; anyone else campaigns afresh.
pub(super) fn succeed(now: DbTime, name: &str, current: Option<&Lease>, ask: &Ask<'_>) -> Decision {
    let (candidate, term) = (ask.me, ask.term.unwrap_or_default());
    match current {
        Some(row) if row.live_holder(now) == Some(candidate) && row.term == term => {
            if let Some(reason) = step_down_reason(row, candidate) {
                return unchanged(current, Effect::SteppedDown(reason));
            }
            let Some(next) = ask.epoch.next_term(term) else {
                return unchanged(current, Effect::TermsExhausted);
            };
            let lease = new_tenure(name, next, candidate, ask.ttl_ms, &row.metadata, now);
            let detail = format!("succeeded its own term {term}");
            let decision = changed(
                lease,
                EventKind::Acquired,
                detail,
                Effect::Acquired {
                    took_over_from: None,
                },
            );
            acquisition(decision, ask.purpose, true)
        }
        _ => {
            let fresh = Ask {
                term: None,
                metadata: &None,
                ..*ask
            };
            campaign(now, name, current, &fresh)
        }
    }
}

/// The holder `me` hands over to a `better` candidate whose priority counts: the lease is
/// reserved for it (the graceful handover), and the holder steps down — it stops its work and
/// releases, and only then can `better` acquire. Recorded as a handover for priority.
fn hand_over_to_better(
    row: &Lease,
    me: &str,
    standing: &Standing<'_>,
    better: &super::Rival,
    now: DbTime,
) -> Decision {
    let lease = Lease {
        handover_to: Some(better.candidate.clone()),
        ..row.clone()
    };
    let why = if standing.backs_off(now) {
        ", backing off: its tenures kept ending by expiry"
    } else {
        ""
    };
    let detail = format!(
        "priority: '{}' (priority {}) preferred over '{me}' (priority {}{why})",
        better.candidate, better.priority, standing.priority
    );
    let reason = StepDownReason::HandoverTo(better.candidate.clone());
    changed(
        lease,
        EventKind::HandedOver,
        detail,
        Effect::SteppedDown(reason),
    )
}

/// The live holder of `term` extends it by the row's own ttl; never acquires.
pub(super) fn renew(now: DbTime, current: Option<&Lease>, candidate: &str, term: u64) -> Decision {
    match current {
        Some(row) if row.live_holder(now) == Some(candidate) && row.term == term => {
            if let Some(reason) = step_down_reason(row, candidate) {
                return unchanged(current, Effect::SteppedDown(reason));
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
                wake: false,
                effect: Effect::Renewed,
            }
        }
        _ => unchanged(current, Effect::NotHolder),
    }
}

/// The holder of `term` gives it up; nobody may start before `acquired_at + at_least`.
pub(super) fn release(
    now: DbTime,
    current: Option<&Lease>,
    candidate: &str,
    term: u64,
    at_least_ms: u64,
    reason: Option<&str>,
    purpose: Purpose,
) -> Decision {
    match current {
        Some(row) if row.holder.as_deref() == Some(candidate) && row.term == term => {
            let lease = vacate(row, now, at_least_ms);
            let detail = reason.unwrap_or_default().to_string();
            let mut decision = changed(lease, EventKind::Released, detail, Effect::Released);
            if !purpose.records_release(reason) {
                // Still announced: a waiter may be waiting for exactly this.
                decision.event = None;
            }
            decision
        }
        _ => unchanged(current, Effect::NotHolder),
    }
}

/// Force a re-election, keeping the lock-delay unless `immediate`.
pub(super) fn demote(now: DbTime, current: Option<&Lease>, immediate: bool) -> Decision {
    let Some(row) = current else {
        return unchanged(current, Effect::UnknownName);
    };
    let expires_at = if immediate {
        row.expires_at.min(now)
    } else {
        row.expires_at
    };
    if row.holder.is_none() && expires_at == row.expires_at {
        return unchanged(current, Effect::NoChange);
    }
    let detail = match (&row.holder, immediate) {
        (Some(h), false) => format!("{h} demoted; nobody starts before {expires_at}"),
        (Some(h), true) => format!("{h} demoted immediately (unsafe without fencing)"),
        (None, _) => "lock-delay cut short (unsafe without fencing)".to_string(),
    };
    let lease = Lease {
        holder: None,
        expires_at,
        handover_to: unforced(row),
        ..row.clone()
    };
    changed(lease, EventKind::Demoted, detail, Effect::Demoted)
}

/// Force `to` as the leader: graceful (reserved for it) or, if `immediate`, installed at once
/// with a new term of `epoch`.
pub(super) fn handover(
    now: DbTime,
    epoch: Epoch,
    current: Option<&Lease>,
    to: &str,
    immediate: bool,
) -> Decision {
    // A name nobody has held (only paused) has no ttl to reserve it or install with.
    let Some(row) = current.filter(|row| row.term > 0) else {
        return unchanged(current, Effect::UnknownName);
    };
    if immediate {
        let Some(term) = epoch.next_term(row.term) else {
            return unchanged(current, Effect::TermsExhausted);
        };
        let previous = row.holder.clone().unwrap_or_default();
        let lease = Lease {
            holder: Some(to.to_string()),
            term,
            acquired_at: now,
            renewed_at: now,
            expires_at: now.plus_ms(row.ttl_ms),
            metadata: None,
            // Marks the grant as not yet adopted: `to` adopts it at its next campaign.
            handover_to: Some(to.to_string()),
            ..row.clone()
        };
        let detail = format!("forced from '{previous}' (unsafe unless writes are fenced)");
        return changed(lease, EventKind::Forced, detail, Effect::Forced);
    }
    let pending = row.handover_to.as_deref() == Some(to) && row.handover_pending(now);
    if row.live_holder(now) == Some(to) || pending {
        return unchanged(current, Effect::NoChange);
    }
    // Without a live holder the reservation must count from now, not from an old expiry.
    let expires_at = if row.live_holder(now).is_some() {
        row.expires_at
    } else {
        row.expires_at.max(now)
    };
    // An expired holder that is the target itself would read as an unadopted forced
    // grant: it no longer leads, so the row forgets it.
    let holder = row.holder.clone().filter(|h| h != to);
    let lease = Lease {
        holder,
        handover_to: Some(to.to_string()),
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

/// Maintenance stop; a name never used gets a row that only records the pause.
pub(super) fn pause(now: DbTime, name: &str, current: Option<&Lease>) -> Decision {
    let lease = match current {
        Some(row) if row.paused => return unchanged(current, Effect::NoChange),
        Some(row) => Lease {
            paused: true,
            ..row.clone()
        },
        None => Lease {
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
        },
    };
    changed(lease, EventKind::Paused, String::new(), Effect::Paused)
}

/// End a pause.
pub(super) fn resume(current: Option<&Lease>) -> Decision {
    match current {
        None => unchanged(current, Effect::UnknownName),
        Some(row) if !row.paused => unchanged(current, Effect::NoChange),
        Some(row) => {
            let lease = Lease {
                paused: false,
                ..row.clone()
            };
            changed(lease, EventKind::Resumed, String::new(), Effect::Resumed)
        }
    }
}

/// Nothing written, nothing recorded.
fn unchanged(current: Option<&Lease>, effect: Effect) -> Decision {
    Decision {
        lease: current.cloned(),
        write: false,
        event: None,
        wake: false,
        effect,
    }
}

/// `lease` written, with a history event of its term and holder, announced.
fn changed(lease: Lease, kind: EventKind, detail: String, effect: Effect) -> Decision {
    Decision {
        event: Some(Event {
            kind,
            term: lease.term,
            holder: lease.holder.clone(),
            detail,
        }),
        lease: Some(lease),
        write: true,
        wake: true,
        effect,
    }
}

/// A new tenure begun for `purpose`: announced only to an election's followers and watchers;
/// recorded unless it is `uncontested` (the lease was vacant, or the holder's own) and the
/// purpose records only what an operator needs.
fn acquisition(mut decision: Decision, purpose: Purpose, uncontested: bool) -> Decision {
    decision.wake = purpose.wakes_on_acquisition();
    if uncontested && !purpose.records_every_cycle() {
        decision.event = None;
    }
    decision
}

/// Why the live holder `me` must step down instead of renewing, if it must.
fn step_down_reason(row: &Lease, me: &str) -> Option<StepDownReason> {
    if row.paused {
        return Some(StepDownReason::Paused);
    }
    match &row.handover_to {
        Some(target) if target != me => Some(StepDownReason::HandoverTo(target.clone())),
        _ => None,
    }
}

/// The row after its holder's campaign extended it.
fn renewed(row: &Lease, now: DbTime, ask: &Ask<'_>) -> Lease {
    Lease {
        renewed_at: now,
        expires_at: now.plus_ms(ask.ttl_ms),
        ttl_ms: ask.ttl_ms,
        metadata: ask.metadata.clone(),
        handover_to: None,
        ..row.clone()
    }
}

/// `handover_to` once the holder is gone: an unadopted forced grant's mark goes with it.
fn unforced(row: &Lease) -> Option<String> {
    if row.forced_grant_pending() {
        None
    } else {
        row.handover_to.clone()
    }
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
        handover_to: unforced(row),
        ..row.clone()
    }
}
