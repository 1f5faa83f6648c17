//! Go's duration syntax, both ways: [`parse`] reads it (`time.ParseDuration`), as Consul reads
//! a session's `TTL` and `LockDelay` and a blocking query's `wait`, and [`format`] writes it
//! (`Duration.String`), as Consul writes durations in its answers and errors. Parsing takes
//! "0", or one or more decimal numbers, each with
//! an optional fraction and a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`) — "15s", "1.5h",
//! "2m30s". A bare number other than 0 is refused, as Consul refuses it. Unlike Go, a sign
//! is refused (nothing here takes a negative duration) and a value beyond `Duration`'s range
//! saturates instead of failing (every caller caps it lower anyway).

use std::time::Duration;

/// The duration `text` spells, or `None` if it is not Go's syntax.
pub fn parse(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut nanos = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..digits];
        if !number.bytes().any(|b| b.is_ascii_digit()) || number.matches('.').count() > 1 {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        nanos += value * scale;
        rest = &rest[unit..];
    }
    // `as` saturates at u64::MAX nanoseconds (about 584 years), and a negative sum is 0: the
    // saturation is the rule here.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let nanos = nanos as u64;
    Some(Duration::from_nanos(nanos))
}

/// `d` as Go's `Duration.String` writes it: `0s`; below a second in the largest unit that
/// keeps it at least 1 (`1.5ms`, `500ms`, `7ns`, `10µs`); else hours, minutes and seconds
/// (`10s`, `1m30s`, `24h0m0s`, `1.5s`), fractions without trailing zeros.
pub fn format(d: Duration) -> String {
    let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    const SECOND: u64 = 1_000_000_000;
    match nanos {
        0 => "0s".to_string(),
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => format!("{}µs", fraction(n, 1_000)),
        n if n < SECOND => format!("{}ms", fraction(n, 1_000_000)),
        n => {
            let seconds = fraction(n % (60 * SECOND), SECOND);
            let minutes = n / (60 * SECOND);
            match (minutes / 60, minutes % 60) {
                (0, 0) => format!("{seconds}s"),
                (0, m) => format!("{m}m{seconds}s"),
                (h, m) => format!("{h}h{m}m{seconds}s"),
            }
        }
    }
}

/// `value / unit` with its fraction, if any, without trailing zeros.
fn fraction(value: u64, unit: u64) -> String {
    let (whole, rest) = (value / unit, value % unit);
    if rest == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{rest:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::{format, parse};
    use std::time::Duration;

    #[test]
    fn writes_what_go_writes() {
        let ms = Duration::from_millis;
        assert_eq!(format(Duration::ZERO), "0s");
        assert_eq!(format(ms(10_000)), "10s");
        assert_eq!(format(ms(5_000)), "5s");
        assert_eq!(format(ms(1_500)), "1.5s");
        assert_eq!(format(ms(500)), "500ms");
        assert_eq!(format(Duration::from_micros(1_500)), "1.5ms");
        assert_eq!(format(Duration::from_micros(10)), "10µs");
        assert_eq!(format(Duration::from_nanos(7)), "7ns");
        assert_eq!(format(ms(90_000)), "1m30s");
        assert_eq!(format(ms(86_400_000)), "24h0m0s");
        assert_eq!(format(ms(3_600_500)), "1h0m0.5s");
        for d in [
            ms(1),
            ms(1_500),
            ms(90_000),
            ms(86_400_000),
            Duration::from_nanos(123),
        ] {
            assert_eq!(parse(&format(d)), Some(d), "{d:?}");
        }
    }

    #[test]
    fn reads_what_go_reads() {
        let ms = Duration::from_millis;
        assert_eq!(parse("0"), Some(Duration::ZERO));
        assert_eq!(parse("15s"), Some(ms(15_000)));
        assert_eq!(parse("500ms"), Some(ms(500)));
        assert_eq!(parse("1.5h"), Some(ms(5_400_000)));
        assert_eq!(parse("2m30s"), Some(ms(150_000)));
        assert_eq!(parse(".5s"), Some(ms(500)));
        assert_eq!(parse("1.s"), Some(ms(1000)));
        assert_eq!(parse("10us"), Some(Duration::from_micros(10)));
        assert_eq!(parse("10µs"), Some(Duration::from_micros(10)));
        assert_eq!(parse("7ns"), Some(Duration::from_nanos(7)));
        assert_eq!(
            parse("99999999999999999999h"),
            Some(Duration::from_nanos(u64::MAX))
        );
    }

    #[test]
    fn refuses_what_go_refuses() {
        for bad in [
            "", "20", "s", ".s", "1..2s", "1.2.3s", "15 s", "15sec", "1d", "soon", "-1s", "+1s",
            "1s ",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
