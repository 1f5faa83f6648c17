//! Which keys a request names: etcd's `key` and `range_end`, read as etcd reads them.

/// The keys of a `(key, range_end)` pair (public for a follower of the log that filters
/// events itself, such as `tenure serve`'s watch hub).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Span {
    /// One key (`range_end` empty).
    One(Vec<u8>),
    /// Every key from `key` on (`range_end` is `"\0"`).
    From(Vec<u8>),
    /// Every key in `[key, end)`.
    Between(Vec<u8>, Vec<u8>),
    /// No key: `range_end` at or below `key` (etcd answers such a range with nothing, not an
    /// error).
    Empty,
}

impl Span {
    /// The span etcd reads for `key` and `range_end`.
    pub fn new(key: &[u8], range_end: &[u8]) -> Span {
        match range_end {
            [] => Span::One(key.to_vec()),
            [0] => Span::From(key.to_vec()),
            end if end > key => Span::Between(key.to_vec(), end.to_vec()),
            _ => Span::Empty,
        }
    }

    /// Whether `key` is in the span (the reference's and a watch hub's test of a key; the
    /// layer asks its SQL).
    pub fn contains(&self, key: &[u8]) -> bool {
        match self {
            Span::One(k) => key == k.as_slice(),
            Span::From(from) => key >= from.as_slice(),
            Span::Between(from, end) => key >= from.as_slice() && key < end.as_slice(),
            Span::Empty => false,
        }
    }

    /// Whether the span and `other` share a key (for the duplicate-key rule of a Txn).
    pub(crate) fn meets(&self, other: &Span) -> bool {
        // Both as half-open intervals [lo, hi), `None` for no upper bound.
        fn bounds(s: &Span) -> Option<(&[u8], Option<Vec<u8>>)> {
            match s {
                Span::One(k) => {
                    let mut next = k.clone();
                    next.push(0);
                    Some((k, Some(next)))
                }
                Span::From(k) => Some((k, None)),
                Span::Between(k, e) => Some((k, Some(e.clone()))),
                Span::Empty => None,
            }
        }
        let (Some((a_lo, a_hi)), Some((b_lo, b_hi))) = (bounds(self), bounds(other)) else {
            return false;
        };
        let below = |lo: &[u8], hi: &Option<Vec<u8>>| hi.as_ref().is_none_or(|h| lo < h.as_slice());
        below(a_lo, &b_hi) && below(b_lo, &a_hi)
    }
}

/// The `range_end` that makes `prefix` a prefix range (etcd's `GetPrefixRangeEnd`): the
/// prefix with its last byte below 0xff raised by one and what follows dropped; `"\0"` (every
/// key from `prefix` on) when every byte is 0xff.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_etcd_reads_them() {
        assert_eq!(Span::new(b"a", b""), Span::One(b"a".to_vec()));
        assert_eq!(Span::new(b"a", b"\0"), Span::From(b"a".to_vec()));
        assert_eq!(Span::new(b"\0", b"\0"), Span::From(b"\0".to_vec()));
        assert_eq!(
            Span::new(b"a", b"c"),
            Span::Between(b"a".to_vec(), b"c".to_vec())
        );
        assert_eq!(Span::new(b"c", b"a"), Span::Empty);
        assert_eq!(Span::new(b"a", b"a"), Span::Empty);
        let all = Span::new(b"\0", b"\0");
        assert!(all.contains(b"\0") && all.contains(b"zzz") && all.contains(&[0xff]));
        let ab = Span::new(b"a", b"b");
        assert!(ab.contains(b"a") && ab.contains(b"a\xff\xff") && !ab.contains(b"b"));
        assert!(!Span::Empty.contains(b"a"));
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
        let span = Span::new(b"lock/", &prefix_end(b"lock/"));
        assert!(span.contains(b"lock/") && span.contains(b"lock/\xff") && !span.contains(b"lock0"));
    }

    #[test]
    fn overlaps() {
        let one = |k: &[u8]| Span::new(k, b"");
        assert!(one(b"a").meets(&one(b"a")));
        assert!(!one(b"a").meets(&one(b"b")));
        assert!(!one(b"a").meets(&one(b"a\0")));
        assert!(Span::new(b"a", b"c").meets(&one(b"b")));
        assert!(!Span::new(b"a", b"c").meets(&one(b"c")));
        assert!(Span::new(b"a", b"\0").meets(&one(b"zz")));
        assert!(Span::new(b"b", b"d").meets(&Span::new(b"a", b"c")));
        assert!(!Span::new(b"c", b"d").meets(&Span::new(b"a", b"c")));
        assert!(!Span::Empty.meets(&one(b"a")));
    }
}
