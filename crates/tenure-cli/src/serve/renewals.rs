//! Each name's renewals as the shared watcher sees them, for the status page's charts
//! (`GET /v1/renewals`).
//!
//! The holder that renews is often another process, so the server measures from the outside,
//! by the database's clock only: each read of the leases (`Store::list`) that shows a name's
//! `renewed_at` moved on, in the same term, is one renewal. For it the watcher keeps
//! - the **gap**: this renewal's instant minus the previous one's (or the acquisition's), the
//!   renew interval the holder actually kept, as the database saw its statements land;
//! - the **lease left**: the previous expiry minus this renewal's instant, how much of the
//!   lease was left when the renewal landed — how close the name came to standing vacant.
//!
//! What cannot be seen from the outside: the holder's configured renew interval (not in the
//! row; the default is ttl/4) and its safety margin, so no *lag* against the interval and no
//! *belief* margin — those are the holder's own `tenure_renew_lag_seconds` and
//! `tenure_belief_margin_seconds`. Exact while the watcher reads more often than the holder
//! renews (`--poll-interval` below the renew interval). A read that missed a renewal shows a
//! gap spanning both and a lease left too small (never too large); when the previous expiry had
//! already passed at the renewal the watcher read, it missed one for certain, and counts it as
//! *unplaced* instead of charting it.
//!
//! Bounded: the last [`POINTS`] renewals of at most [`NAMES`] names; a name gone from the
//! table frees its place. IO-free: the watcher reads, this only compares.

// Only the HTTP API shows them (`GET /v1/renewals`, the status page); the watcher keeps them
// in every build.
#![cfg_attr(not(feature = "http-api"), allow(dead_code))]

use crate::output::time;
use serde::Serialize;
use std::collections::{BTreeMap, HashSet, VecDeque};
use tenure::{DbTime, Snapshot};

/// Renewals kept per name.
pub(crate) const POINTS: usize = 100;

/// Names followed at once; later ones are left out until a followed name leaves the table.
pub(crate) const NAMES: usize = 200;

/// One renewal seen by the watcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Point {
    /// The renewal's instant (the row's `renewed_at`).
    pub at: DbTime,
    pub term: u64,
    /// Microseconds since the previous renewal (or the acquisition) of the same term.
    pub gap_us: i64,
    /// Microseconds the lease had left when the renewal landed (the previous expiry minus
    /// `at`); always positive.
    pub left_us: i64,
}

/// What the watcher knows of one name.
#[derive(Debug)]
struct Series {
    holder: Option<String>,
    term: u64,
    ttl_ms: u64,
    /// The row's `renewed_at` and `expires_at` at the latest read.
    renewed: DbTime,
    expires: DbTime,
    points: VecDeque<Point>,
    unplaced: u64,
}

/// Every followed name's renewals.
#[derive(Debug)]
pub(crate) struct Renewals {
    names: BTreeMap<String, Series>,
    max_names: usize,
    max_points: usize,
    /// Names of the latest read that are not followed (beyond `max_names`).
    left_out: usize,
}

impl Default for Renewals {
    fn default() -> Renewals {
        Renewals::new(NAMES, POINTS)
    }
}

impl Renewals {
    /// Follows at most `max_names` names, `max_points` renewals each.
    pub(crate) fn new(max_names: usize, max_points: usize) -> Renewals {
        Renewals {
            names: BTreeMap::new(),
            max_names,
            max_points,
            left_out: 0,
        }
    }

    /// Takes one read of the leases in.
    pub(crate) fn observe(&mut self, snapshot: &Snapshot) {
        // A name gone from the table is forgotten, and frees its place.
        let read: HashSet<&str> = snapshot.leases.iter().map(|l| l.name.as_str()).collect();
        self.names.retain(|name, _| read.contains(name.as_str()));
        self.left_out = 0;
        for lease in &snapshot.leases {
            let Some(series) = self.names.get_mut(&lease.name) else {
                if self.names.len() >= self.max_names {
                    self.left_out += 1;
                    continue;
                }
                self.names.insert(
                    lease.name.clone(),
                    Series {
                        holder: lease.holder.clone(),
                        term: lease.term,
                        ttl_ms: lease.ttl_ms,
                        renewed: lease.renewed_at,
                        expires: lease.expires_at,
                        points: VecDeque::new(),
                        unplaced: 0,
                    },
                );
                continue;
            };
            let renewed = lease.holder.is_some()
                && lease.term == series.term
                && lease.holder == series.holder
                && lease.renewed_at > series.renewed;
            if renewed {
                let left_us = series.expires.0.saturating_sub(lease.renewed_at.0);
                if left_us > 0 {
                    if series.points.len() >= self.max_points {
                        series.points.pop_front();
                    }
                    series.points.push_back(Point {
                        at: lease.renewed_at,
                        term: lease.term,
                        gap_us: lease.renewed_at.0.saturating_sub(series.renewed.0),
                        left_us,
                    });
                } else {
                    series.unplaced += 1;
                }
            }
            series.holder.clone_from(&lease.holder);
            series.term = lease.term;
            series.ttl_ms = lease.ttl_ms;
            series.renewed = lease.renewed_at;
            series.expires = lease.expires_at;
        }
    }

    /// The renewals of `name`, oldest first (tests).
    #[cfg(test)]
    pub(crate) fn points(&self, name: &str) -> Vec<Point> {
        self.names
            .get(name)
            .map(|s| s.points.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The answer of `GET /v1/renewals`.
    pub(crate) fn json(&self) -> RenewalsJson {
        let ms = |us: i64| u64::try_from(us / 1000).unwrap_or(0);
        RenewalsJson {
            points_per_name: self.max_points,
            max_names: self.max_names,
            left_out: self.left_out,
            names: self
                .names
                .iter()
                .map(|(name, s)| NameJson {
                    name: name.clone(),
                    holder: s.holder.clone(),
                    term: s.term,
                    ttl_ms: s.ttl_ms,
                    unplaced: s.unplaced,
                    renewals: s
                        .points
                        .iter()
                        .map(|p| PointJson {
                            at: time(p.at),
                            term: p.term,
                            gap_ms: ms(p.gap_us),
                            left_ms: ms(p.left_us),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// `GET /v1/renewals`.
#[derive(Debug, Serialize)]
pub(crate) struct RenewalsJson {
    /// Renewals kept per name.
    pub points_per_name: usize,
    /// Names followed at once.
    pub max_names: usize,
    /// Names of the latest read not followed (beyond `max_names`).
    pub left_out: usize,
    /// The followed names, by name.
    pub names: Vec<NameJson>,
}

/// One name's renewals.
#[derive(Debug, Serialize)]
pub(crate) struct NameJson {
    pub name: String,
    /// The holder at the latest read (`null`: vacant).
    pub holder: Option<String>,
    pub term: u64,
    /// The ttl the holder last asked for.
    pub ttl_ms: u64,
    /// Renewals the watcher read too late to chart (the previous expiry had passed).
    pub unplaced: u64,
    /// Oldest first.
    pub renewals: Vec<PointJson>,
}

/// One renewal.
#[derive(Debug, Serialize)]
pub(crate) struct PointJson {
    /// The renewal's instant, by the database's clock.
    pub at: String,
    pub term: u64,
    /// Milliseconds since the previous renewal (or the acquisition).
    pub gap_ms: u64,
    /// Milliseconds the lease had left when the renewal landed.
    pub left_ms: u64,
}

#[cfg(test)]
mod tests;
