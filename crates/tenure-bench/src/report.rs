//! Percentiles, the figures of a measurement ([`Summary`] of trials, [`Throughput`] of lock
//! cycles), PASS/MISS verdicts and the tables printed per backend. Pure: no IO but
//! [`Table::render`]'s string.

use serde::Serialize;
use std::time::Duration;

/// The `p`-th percentile (0..=100) of `samples` by the nearest-rank method: the smallest
/// sample with at least p % of the samples at or below it. `None` for no samples.
pub(crate) fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    // In 0..=len: p is a percentile (0..=100), and the float's integer part is small.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// p50 and p99 of a set of trials, and how many failed.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Summary {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub ok: usize,
    pub failed: usize,
}

impl Summary {
    pub(crate) fn of(samples: &[f64], failed: usize) -> Summary {
        Summary {
            p50: percentile(samples, 50.0),
            p99: percentile(samples, 99.0),
            ok: samples.len(),
            failed,
        }
    }
}

/// Cycles per second and latency of one configuration.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Throughput {
    pub tasks: usize,
    pub cycles: usize,
    pub per_second: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub errors: usize,
    pub first_error: Option<String>,
}

impl Throughput {
    /// The figures of every task's `(latencies in ms, errors, first error)`.
    pub(crate) fn merge(
        tasks: usize,
        run: Duration,
        parts: impl IntoIterator<Item = (Vec<f64>, usize, Option<String>)>,
    ) -> Throughput {
        let mut all = Vec::new();
        let (mut errors, mut first_error) = (0, None);
        for (latencies, e, first) in parts {
            all.extend(latencies);
            errors += e;
            first_error = first_error.or(first);
        }
        Throughput {
            tasks,
            cycles: all.len(),
            per_second: all.len() as f64 / run.as_secs_f64(),
            p50_ms: percentile(&all, 50.0),
            p99_ms: percentile(&all, 99.0),
            errors,
            first_error,
        }
    }
}

/// Lock cycles as the tables show them: per second, p50 and p99, and errors if any.
pub(crate) fn cycles(t: &Throughput) -> String {
    let mut s = format!(
        "{}/s (p50 {:.2} ms, p99 {:.2} ms)",
        count(Some(t.per_second)),
        t.p50_ms.unwrap_or(f64::NAN),
        t.p99_ms.unwrap_or(f64::NAN)
    );
    if t.errors > 0 {
        s.push_str(&format!(
            " [{} errors: {}]",
            t.errors,
            t.first_error.as_deref().unwrap_or("?")
        ));
    }
    s
}

/// A summary in seconds as one in milliseconds.
pub(crate) fn ms(s: &Summary) -> Summary {
    Summary {
        p50: s.p50.map(|v| v * 1e3),
        p99: s.p99.map(|v| v * 1e3),
        ..s.clone()
    }
}

/// Whether a figure meets its goal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) enum Verdict {
    Pass,
    Miss,
}

impl Verdict {
    /// `Pass` if `ok`.
    pub(crate) fn from(ok: bool) -> Verdict {
        if ok {
            Verdict::Pass
        } else {
            Verdict::Miss
        }
    }

    /// `Pass` only if every verdict passes (`Miss` for none: nothing was measured).
    pub(crate) fn all(verdicts: &[Verdict]) -> Verdict {
        Verdict::from(!verdicts.is_empty() && verdicts.iter().all(|v| *v == Verdict::Pass))
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Miss => "MISS",
        }
    }
}

/// `value <= limit`, a missing value misses.
pub(crate) fn at_most(value: Option<f64>, limit: f64) -> Verdict {
    Verdict::from(value.is_some_and(|v| v <= limit))
}

/// `value >= limit`, a missing value misses.
pub(crate) fn at_least(value: Option<f64>, limit: f64) -> Verdict {
    Verdict::from(value.is_some_and(|v| v >= limit))
}

/// `a / b`, when both exist and `b` is not zero.
pub(crate) fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}

/// Seconds with millisecond precision, or `-`.
pub(crate) fn secs(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.3} s"))
}

/// Milliseconds, or `-`.
pub(crate) fn millis(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| {
        if v < 10.0 {
            format!("{v:.2} ms")
        } else {
            format!("{v:.1} ms")
        }
    })
}

/// A ratio as `0.93×`, or `-`.
pub(crate) fn times(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}×"))
}

/// A plain number with a thousands separator (`12,345`), or `-`.
pub(crate) fn count(v: Option<f64>) -> String {
    let Some(v) = v else { return "-".into() };
    // A printed figure (counts, milliseconds): far inside i64.
    #[allow(clippy::cast_possible_truncation)]
    let n = v.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        out.insert(0, '-');
    }
    out
}

/// `p50 / p99` of a summary in seconds, with the number of failed trials if any.
pub(crate) fn secs_summary(s: &Summary) -> String {
    let mut out = format!("{} / {}", secs(s.p50), secs(s.p99));
    if s.failed > 0 {
        out.push_str(&format!(" ({} failed)", s.failed));
    }
    out
}

/// `p50 / p99` of a summary in milliseconds, with the number of failed trials if any.
pub(crate) fn millis_summary(s: &Summary) -> String {
    let mut out = format!("{} / {}", millis(s.p50), millis(s.p99));
    if s.failed > 0 {
        out.push_str(&format!(" ({} failed)", s.failed));
    }
    out
}

/// One line of a table: a measure of tenure, optionally set against another system.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Row {
    pub measure: String,
    pub tenure: String,
    /// What tenure is compared with (`etcd 3.4`, `seeds' SQL`, `raw SQL`), or empty.
    pub against: String,
    pub theirs: String,
    /// tenure / theirs (or as the measure says).
    pub ratio: String,
    pub goal: String,
    pub verdict: Option<Verdict>,
}

impl Row {
    pub(crate) fn new(measure: impl Into<String>, tenure: impl Into<String>) -> Row {
        Row {
            measure: measure.into(),
            tenure: tenure.into(),
            ..Row::default()
        }
    }

    pub(crate) fn against(
        mut self,
        who: impl Into<String>,
        theirs: impl Into<String>,
        ratio: impl Into<String>,
    ) -> Row {
        self.against = who.into();
        self.theirs = theirs.into();
        self.ratio = ratio.into();
        self
    }

    pub(crate) fn goal(mut self, goal: impl Into<String>, verdict: Verdict) -> Row {
        self.goal = goal.into();
        self.verdict = Some(verdict);
        self
    }
}

/// One backend's results.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Table {
    pub title: String,
    pub rows: Vec<Row>,
    /// Caveats and methods printed under the table.
    pub notes: Vec<String>,
}

const HEADERS: [&str; 7] = [
    "measure",
    "tenure",
    "against",
    "their figure",
    "ratio",
    "goal",
    "result",
];

impl Table {
    pub(crate) fn new(title: impl Into<String>) -> Table {
        Table {
            title: title.into(),
            ..Table::default()
        }
    }

    /// A Markdown table (readable as plain text too: the columns are padded).
    pub(crate) fn render(&self) -> String {
        let cells: Vec<[String; 7]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.measure.clone(),
                    r.tenure.clone(),
                    r.against.clone(),
                    r.theirs.clone(),
                    r.ratio.clone(),
                    r.goal.clone(),
                    r.verdict.map_or(String::new(), |v| v.as_str().to_string()),
                ]
            })
            .collect();
        let mut widths = HEADERS.map(|h| h.chars().count());
        for row in &cells {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cols: &[String]| {
            let padded: Vec<String> = cols
                .iter()
                .zip(widths)
                .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
                .collect();
            format!("| {} |\n", padded.join(" | "))
        };
        let mut out = format!("### {}\n\n", self.title);
        out.push_str(&line(&HEADERS.map(String::from)));
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        out.push_str(&format!("|-{}-|\n", rule.join("-|-")));
        for row in &cells {
            out.push_str(&line(row));
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for note in &self.notes {
                out.push_str(&format!("- {note}\n"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&samples, 50.0), Some(10.0));
        assert_eq!(percentile(&samples, 99.0), Some(20.0));
        assert_eq!(percentile(&samples, 0.0), Some(1.0));
        assert_eq!(percentile(&samples, 100.0), Some(20.0));
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[], 50.0), None);
        let hundred: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&hundred, 99.0), Some(99.0));
    }

    #[test]
    fn summaries_count_failures() {
        let s = Summary::of(&[1.0, 2.0], 1);
        assert_eq!((s.p50, s.p99, s.ok, s.failed), (Some(1.0), Some(2.0), 2, 1));
        assert_eq!(secs_summary(&s), "1.000 s / 2.000 s (1 failed)");
        assert_eq!(millis_summary(&Summary::of(&[], 0)), "- / -");
    }

    #[test]
    fn tasks_merge_into_one_figure() {
        let t = Throughput::merge(
            2,
            Duration::from_secs(2),
            [
                (vec![1.0, 3.0], 0, None),
                (vec![2.0, 4.0], 2, Some("busy".to_string())),
                (vec![], 1, Some("later".to_string())),
            ],
        );
        assert_eq!((t.tasks, t.cycles, t.errors), (2, 4, 3));
        assert_eq!(t.per_second, 2.0);
        assert_eq!((t.p50_ms, t.p99_ms), (Some(2.0), Some(4.0)));
        assert_eq!(t.first_error.as_deref(), Some("busy"));
        assert_eq!(
            Throughput::merge(1, Duration::from_secs(1), []).p50_ms,
            None
        );
    }

    #[test]
    fn verdicts() {
        assert_eq!(at_most(Some(2.2), 2.2), Verdict::Pass);
        assert_eq!(at_most(Some(2.21), 2.2), Verdict::Miss);
        assert_eq!(at_most(None, 2.2), Verdict::Miss);
        assert_eq!(at_least(Some(0.8), 0.8), Verdict::Pass);
        assert_eq!(at_least(Some(0.79), 0.8), Verdict::Miss);
        assert_eq!(Verdict::all(&[Verdict::Pass, Verdict::Pass]), Verdict::Pass);
        assert_eq!(Verdict::all(&[Verdict::Pass, Verdict::Miss]), Verdict::Miss);
        assert_eq!(Verdict::all(&[]), Verdict::Miss);
        assert_eq!(ratio(Some(1.0), Some(4.0)), Some(0.25));
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
        assert_eq!(ratio(None, Some(1.0)), None);
    }

    #[test]
    fn formats() {
        assert_eq!(count(Some(12345.4)), "12,345");
        assert_eq!(count(Some(999.0)), "999");
        assert_eq!(count(Some(-1000.0)), "-1,000");
        assert_eq!(count(None), "-");
        assert_eq!(millis(Some(1.234)), "1.23 ms");
        assert_eq!(millis(Some(12.34)), "12.3 ms");
        assert_eq!(times(Some(0.5)), "0.50×");
        assert_eq!(secs(Some(1.5)), "1.500 s");
    }

    #[test]
    fn tables_are_padded_markdown() {
        let mut t = Table::new("PostgreSQL");
        t.rows.push(
            Row::new("crash failover p99", "1.9 s")
                .against("etcd", "2.1 s", "0.90×")
                .goal("≤ 2.2 s", Verdict::Pass),
        );
        t.rows.push(Row::new("RSS", "9 MB"));
        t.notes.push("2 cores".into());
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "### PostgreSQL");
        assert!(lines[2].starts_with("| measure "), "{text}");
        assert!(lines[3].starts_with("|----"), "{text}");
        assert!(lines[4].contains("| PASS   |"), "{text}");
        assert!(lines[5].ends_with("|        |"), "{text}");
        let width = lines[2].chars().count();
        assert!(
            lines[2..6].iter().all(|l| l.chars().count() == width),
            "{text}"
        );
        assert_eq!(lines.last(), Some(&"- 2 cores"));
    }
}
