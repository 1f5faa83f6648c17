//! Renderings of leases, leaders and history: one JSON object per answer for programs (JSON
//! lines for `watch`), aligned text for people.

use serde::Serialize;
use std::time::Duration;
use tenure::{Applied, DbTime, Effect, HistoryEntry, LeaderInfo, Lease};

/// A database instant as RFC 3339 UTC with milliseconds.
pub(crate) fn time(t: DbTime) -> String {
    t.to_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A duration for people: `850ms`, `8.2s`, `3m05s`.
pub(crate) fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    }
}

/// Who leads a name.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(crate) struct LeaderJson {
    pub holder: String,
    pub term: u64,
    pub since: String,
    pub remaining_ms: u64,
    pub metadata: Option<String>,
}

impl From<&LeaderInfo> for LeaderJson {
    fn from(l: &LeaderInfo) -> LeaderJson {
        LeaderJson {
            holder: l.holder.clone(),
            term: l.term,
            since: time(l.since),
            remaining_ms: u64::try_from(l.remaining.as_millis()).unwrap_or(u64::MAX),
            metadata: l.metadata.clone(),
        }
    }
}

/// The state of one name at one database instant.
#[derive(Debug, Serialize, PartialEq, Eq, Clone)]
pub(crate) struct LeaseJson {
    pub name: String,
    /// The live holder, or null when nobody leads.
    pub holder: Option<String>,
    pub term: u64,
    /// When the latest tenure began.
    pub since: String,
    /// Time left of the live holder's lease (0 when nobody leads).
    pub remaining_ms: u64,
    /// Until when the current (or last) lease runs; nobody may start before it.
    pub expires_at: String,
    pub paused: bool,
    pub handover_to: Option<String>,
    pub metadata: Option<String>,
}

impl LeaseJson {
    pub(crate) fn new(lease: &Lease, now: DbTime) -> LeaseJson {
        let holder = lease.live_holder(now).map(str::to_string);
        LeaseJson {
            name: lease.name.clone(),
            remaining_ms: if holder.is_some() {
                lease.remaining_ms(now)
            } else {
                0
            },
            holder,
            term: lease.term,
            since: time(lease.acquired_at),
            expires_at: time(lease.expires_at),
            paused: lease.paused,
            handover_to: lease.handover_target().map(str::to_string),
            metadata: lease.metadata.clone(),
        }
    }

    /// One line for people.
    pub(crate) fn line(&self) -> String {
        let mut line = match &self.holder {
            Some(h) => format!(
                "{}: led by {h} (term {}) since {}, {} left",
                self.name,
                self.term,
                self.since,
                human_duration(Duration::from_millis(self.remaining_ms))
            ),
            None => format!("{}: no leader (last term {})", self.name, self.term),
        };
        if self.paused {
            line.push_str(", paused");
        }
        if let Some(to) = &self.handover_to {
            line.push_str(&format!(", handover to {to}"));
        }
        if let (Some(m), Some(_)) = (&self.metadata, &self.holder) {
            line.push_str(&format!(", metadata {m}"));
        }
        line
    }
}

/// One transition.
#[derive(Debug, Serialize)]
pub(crate) struct HistoryJson {
    pub id: i64,
    pub term: u64,
    pub event: String,
    pub holder: Option<String>,
    pub at: String,
    pub actor: String,
    pub detail: String,
}

impl From<&HistoryEntry> for HistoryJson {
    fn from(h: &HistoryEntry) -> HistoryJson {
        HistoryJson {
            id: h.id,
            term: h.term,
            event: h.event.clone(),
            holder: h.holder.clone(),
            at: time(h.at),
            actor: h.actor.clone(),
            detail: h.detail.clone(),
        }
    }
}

/// Prints `value` as one line of JSON on stdout.
pub(crate) fn print_json(value: &impl Serialize) {
    match serde_json::to_string(value) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("tenure: cannot render JSON: {e}"),
    }
}

/// Prints rows as aligned columns.
pub(crate) fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let render = |cells: Vec<String>| {
        let line: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    };
    render(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        render(row.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(human_duration(Duration::from_millis(850)), "850ms");
        assert_eq!(human_duration(Duration::from_millis(8_240)), "8.2s");
        assert_eq!(human_duration(Duration::from_secs(185)), "3m05s");
    }

    #[test]
    fn lease_lines_and_json() {
        let lease = Lease {
            name: "cron".into(),
            holder: Some("a".into()),
            term: 3,
            acquired_at: DbTime(1_800_000_000_000_000),
            renewed_at: DbTime(1_800_000_000_000_000),
            expires_at: DbTime(1_800_000_010_000_000),
            ttl_ms: 10_000,
            metadata: Some("10.0.0.7:80".into()),
            handover_to: None,
            paused: false,
        };
        let live = LeaseJson::new(&lease, DbTime(1_800_000_001_500_000));
        assert_eq!(live.holder.as_deref(), Some("a"));
        assert_eq!(live.remaining_ms, 8_500);
        assert_eq!(live.since, "2027-01-15T08:00:00.000Z");
        assert_eq!(
            live.line(),
            "cron: led by a (term 3) since 2027-01-15T08:00:00.000Z, 8.5s left, metadata 10.0.0.7:80"
        );
        let expired = LeaseJson::new(&lease, DbTime(1_800_000_010_000_000));
        assert_eq!((expired.holder, expired.remaining_ms), (None, 0));
    }
}

/// The answer to an operator action (`demote`, `handover`, `pause`, `resume`), on the command
/// line (`--json`) and over HTTP.
#[derive(Serialize)]
pub(crate) struct AdminAnswer {
    pub action: &'static str,
    /// Whether the action changed anything (its effect is not `no_change`).
    pub changed: bool,
    pub effect: String,
    pub lease: Option<LeaseJson>,
}

impl AdminAnswer {
    pub(crate) fn new(action: &'static str, applied: &Applied) -> AdminAnswer {
        AdminAnswer {
            action,
            changed: applied.effect != Effect::NoChange,
            effect: applied.effect.as_str().to_string(),
            lease: applied
                .lease
                .as_ref()
                .map(|l| LeaseJson::new(l, applied.now)),
        }
    }
}
