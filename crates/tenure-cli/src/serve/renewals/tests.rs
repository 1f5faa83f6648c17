//! The renewals the watcher charts, from reads whose database instants the tests choose.

use super::*;
use tenure::Lease;

const MS: i64 = 1000;

/// `name` held by `holder` in `term`, renewed at `renewed` ms until `expires` ms (database
/// clock), with a ttl of 10 s.
fn row(name: &str, holder: Option<&str>, term: u64, renewed: i64, expires: i64) -> Lease {
    Lease {
        name: name.into(),
        holder: holder.map(str::to_string),
        term,
        acquired_at: DbTime(0),
        renewed_at: DbTime(renewed * MS),
        expires_at: DbTime(expires * MS),
        ttl_ms: 10_000,
        metadata: None,
        handover_to: None,
        paused: false,
    }
}

fn read(now: i64, leases: Vec<Lease>) -> Snapshot {
    Snapshot {
        now: DbTime(now * MS),
        leases,
    }
}

fn point(at: i64, term: u64, gap: i64, left: i64) -> Point {
    Point {
        at: DbTime(at * MS),
        term,
        gap_us: gap * MS,
        left_us: left * MS,
    }
}

#[test]
fn each_renewal_read_gives_its_gap_and_the_lease_left() {
    let mut renewals = Renewals::default();
    // Acquired at 0 with a ttl of 10 s; the first read only sets the baseline.
    renewals.observe(&read(100, vec![row("a", Some("x"), 1, 0, 10_000)]));
    assert!(renewals.points("a").is_empty());
    // Renewed at 2 500 (on time) and at 5 400 (late): each read sees one renewal.
    renewals.observe(&read(2_600, vec![row("a", Some("x"), 1, 2_500, 12_500)]));
    // A read that shows nothing new records nothing.
    renewals.observe(&read(3_000, vec![row("a", Some("x"), 1, 2_500, 12_500)]));
    renewals.observe(&read(5_500, vec![row("a", Some("x"), 1, 5_400, 15_400)]));
    assert_eq!(
        renewals.points("a"),
        vec![point(2_500, 1, 2_500, 7_500), point(5_400, 1, 2_900, 7_100)]
    );
    let json = renewals.json();
    let a = &json.names[0];
    assert_eq!((a.name.as_str(), a.term, a.unplaced), ("a", 1, 0));
    assert_eq!(
        (a.renewals[1].gap_ms, a.renewals[1].left_ms),
        (2_900, 7_100)
    );
    assert_eq!(a.renewals[1].at, "1970-01-01T00:00:05.400Z");
}

#[test]
fn a_new_tenure_starts_afresh_and_a_release_is_no_renewal() {
    let mut renewals = Renewals::default();
    renewals.observe(&read(0, vec![row("a", Some("x"), 1, 0, 10_000)]));
    renewals.observe(&read(3_000, vec![row("a", Some("x"), 1, 2_500, 12_500)]));
    // Released at 4 000: the row's expiry moves, not its renewal.
    renewals.observe(&read(4_100, vec![row("a", None, 1, 2_500, 4_000)]));
    // Term 2 acquired at 20 000, renewed at 22 000: no gap from the old tenure's renewal.
    renewals.observe(&read(20_100, vec![row("a", Some("y"), 2, 20_000, 30_000)]));
    renewals.observe(&read(22_100, vec![row("a", Some("y"), 2, 22_000, 32_000)]));
    assert_eq!(
        renewals.points("a"),
        vec![
            point(2_500, 1, 2_500, 7_500),
            point(22_000, 2, 2_000, 8_000)
        ]
    );
}

#[test]
fn a_renewal_read_after_the_previous_expiry_is_not_charted() {
    let mut renewals = Renewals::default();
    renewals.observe(&read(0, vec![row("a", Some("x"), 1, 0, 10_000)]));
    // Renewals at 2 500, 5 000, 7 500, 10 000 and 12 500 went unread: the one read at 12 600
    // lies past the expiry the watcher knew, so a renewal fell between its reads.
    renewals.observe(&read(12_600, vec![row("a", Some("x"), 1, 12_500, 22_500)]));
    assert!(renewals.points("a").is_empty());
    assert_eq!(renewals.json().names[0].unplaced, 1);
    // The next one is charted again, from the renewal read last.
    renewals.observe(&read(15_100, vec![row("a", Some("x"), 1, 15_000, 25_000)]));
    assert_eq!(renewals.points("a"), vec![point(15_000, 1, 2_500, 7_500)]);
}

#[test]
fn points_and_names_are_bounded() {
    let mut renewals = Renewals::new(2, 3);
    let names = ["a", "b", "c"];
    let at = |t: i64| read(t, names.map(|n| row(n, Some("x"), 1, t, t + 10_000)).into());
    for i in 0..6 {
        renewals.observe(&at(i * 1_000));
    }
    let json = renewals.json();
    assert_eq!(json.left_out, 1, "c is beyond the two names followed");
    assert_eq!(
        json.names
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(
        renewals.points("a"),
        vec![
            point(3_000, 1, 1_000, 9_000),
            point(4_000, 1, 1_000, 9_000),
            point(5_000, 1, 1_000, 9_000)
        ],
        "the last three renewals"
    );
    // `a` leaves the table: `c` takes its place, from a fresh baseline.
    renewals.observe(&read(
        6_000,
        vec![
            row("b", Some("x"), 1, 6_000, 16_000),
            row("c", Some("x"), 1, 6_000, 16_000),
        ],
    ));
    let json = renewals.json();
    assert_eq!(json.left_out, 0);
    assert_eq!(
        json.names
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>(),
        ["b", "c"]
    );
    assert!(renewals.points("c").is_empty());
    assert!(renewals.points("a").is_empty());
}
