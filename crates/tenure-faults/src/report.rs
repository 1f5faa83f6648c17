//! The results table.

use crate::runner::Outcome;
use std::fmt::Write;
use std::time::Duration;

/// The `p`-th percentile (nearest rank) of `values`, if any.
pub fn percentile(values: &[Duration], p: f64) -> Option<Duration> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort();
    // In 0..=len: p is a percentile (0..=100).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn seconds(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.2}", d.as_secs_f64()))
}

/// The backend's name in the table (`pgbouncer`: PostgreSQL through PgBouncer).
pub fn backend(o: &Outcome) -> &'static str {
    if o.pooled {
        return "pgbouncer";
    }
    match o.backend {
        tenure::BackendKind::Postgres => "postgres",
        tenure::BackendKind::MySql => "mariadb",
        tenure::BackendKind::Sqlite => "sqlite",
        _ => "other",
    }
}

/// One line per outcome, as a Markdown table.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| scenario | backend | faults | ops issued | fenced ok/refused | violations | control caught | I2 overlaps | failover p50/p99 s | result |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    for o in outcomes {
        let v = &o.verdict;
        let overlaps = if o.expect.exclusive {
            v.overlaps.to_string()
        } else {
            format!("{} (not asserted)", v.overlaps)
        };
        let control = if o.expect.control_must_fail {
            format!("{} (must be > 0)", v.control.len())
        } else {
            v.control.len().to_string()
        };
        let result = if o.passed() { "PASS" } else { "FAIL" };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {}/{} | {} | {} | {} | {}/{} | {} |",
            o.scenario,
            backend(o),
            v.faults,
            o.issued,
            v.fenced_accepted,
            v.fenced_rejected,
            v.violations.len(),
            control,
            overlaps,
            seconds(percentile(&v.failovers, 50.0)),
            seconds(percentile(&v.failovers, 99.0)),
            result
        );
    }
    out
}

/// What went wrong or was noticed, one line each, after the table.
pub fn details(outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    for o in outcomes {
        let head = format!("{} on {} (seed {})", o.scenario, backend(o), o.seed);
        for note in &o.notes {
            let _ = writeln!(out, "{head}: {note}");
        }
        if !o.verdict.violations.is_empty() {
            let mut by: std::collections::BTreeMap<&str, usize> = Default::default();
            for x in &o.verdict.violations {
                *by.entry(x.invariant).or_default() += 1;
            }
            let counts: Vec<String> = by.iter().map(|(i, n)| format!("{i} ×{n}")).collect();
            let _ = writeln!(
                out,
                "{head}: {} violations ({})",
                o.verdict.violations.len(),
                counts.join(", ")
            );
        }
        for x in o.verdict.violations.iter().take(10) {
            let _ = writeln!(out, "{head}: VIOLATION {}: {}", x.invariant, x.detail);
        }
        if o.expect.control_must_fail && o.verdict.control.is_empty() {
            let _ = writeln!(
                out,
                "{head}: the negative control was not caught: the checker saw nothing"
            );
        }
        if let Some(x) = o.verdict.control.first() {
            let _ = writeln!(
                out,
                "{head}: negative control caught ({}): {}",
                x.invariant, x.detail
            );
        }
        if let Some(dir) = &o.dir {
            let _ = writeln!(out, "{head}: histories kept in {}", dir.display());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 50.0), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&v, 99.0), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&v[..3], 99.0), Some(Duration::from_millis(3)));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
