//! Go's duration syntax (`time.ParseDuration`), as Consul reads a session's `TTL` and
//! `LockDelay` and a blocking query's `wait`: "0", or one or more decimal numbers, each with
//! an optional fraction and a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`) — "15s", "1.5h",
//! "2m30s". A bare number other than 0 is refused, as Consul refuses it. Unlike Go, a sign
//! is refused (nothing here takes a negative duration) and a value beyond `Duration`'s range
//! saturates instead of failing (every caller caps it lower anyway).

use std::time::Duration;

/// The duration `text` spells, or `None` if it is not Go's syntax.
pub(super) fn parse(text: &str) -> Option<Duration> {
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

#[cfg(test)]
mod tests {
    use super::parse;
    use std::time::Duration;

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
