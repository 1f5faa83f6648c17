//! The `ha` profile's results as the command prints them: a Markdown table, then the notes
//! and violations of each scenario, one line each.

use super::scenario::HaOutcome;
use std::fmt::Write;
use std::time::Duration;

/// The results as a Markdown table.
pub fn table(outcomes: &[HaOutcome]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| scenario | cluster | ops issued | fenced ok/refused | violations | control caught | I2 overlaps | database failover s | tenure failover s | result |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    let secs = |d: Option<Duration>| d.map_or("-".into(), |d| format!("{:.2}", d.as_secs_f64()));
    for o in outcomes {
        let v = &o.verdict;
        let caught = if o.scenario.negative_control {
            let mut by: std::collections::BTreeMap<&str, usize> = Default::default();
            for x in &v.violations {
                *by.entry(x.invariant).or_default() += 1;
            }
            let list: Vec<String> = by.iter().map(|(i, n)| format!("{i} ×{n}")).collect();
            if list.is_empty() {
                "**no** (must be caught)".to_string()
            } else {
                format!("yes: {}", list.join(", "))
            }
        } else {
            "-".to_string()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}/{} | {} | {} | {} | {} | {} | {} |",
            o.scenario.label(),
            o.scenario.cluster_name(),
            o.issued,
            v.fenced_accepted,
            v.fenced_rejected,
            v.violations.len(),
            caught,
            v.overlaps,
            secs(o.db_failover),
            secs(o.tenure_failover),
            if o.passed() { "PASS" } else { "FAIL" }
        );
    }
    out
}

/// Notes and violations, one line each, after the table.
pub fn details(outcomes: &[HaOutcome]) -> String {
    let mut out = String::new();
    for o in outcomes {
        let head = format!(
            "{} on {} (seed {})",
            o.scenario.label(),
            o.scenario.cluster_name(),
            o.seed
        );
        for note in &o.notes {
            let _ = writeln!(out, "{head}: {note}");
        }
        for x in o.verdict.violations.iter().take(10) {
            let kind = if o.scenario.negative_control {
                "caught"
            } else {
                "VIOLATION"
            };
            let _ = writeln!(out, "{head}: {kind} {}: {}", x.invariant, x.detail);
        }
        if let Some(x) = o.verdict.control.first() {
            let _ = writeln!(
                out,
                "{head}: the unfenced register accepted {} stale write(s), e.g. {}",
                o.verdict.control.len(),
                x.detail
            );
        }
        if let Some(dir) = &o.dir {
            let _ = writeln!(
                out,
                "{head}: histories and cluster logs kept in {}",
                dir.display()
            );
        }
    }
    out
}
