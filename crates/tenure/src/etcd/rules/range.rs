//! A Range's answer from the keys it names, as etcd's `executeRange` builds it: revision
//! filters, sort, limit, `more`, `count`, `keys_only`, `count_only`.

use crate::etcd::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use crate::etcd::proto::etcdserverpb::RangeRequest;
use crate::etcd::proto::mvccpb::KeyValue;

/// What a Range answers besides its header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Shaped {
    pub kvs: Vec<KeyValue>,
    pub more: bool,
    pub count: i64,
}

/// Whether the answer comes in key order, ascending (etcd's `IsDefaultOrdering`): then a
/// limit can be applied while reading.
pub(crate) fn default_ordering(r: &RangeRequest) -> bool {
    r.sort_order == SortOrder::None as i32
        || (r.sort_target == SortTarget::Key as i32 && r.sort_order == SortOrder::Ascend as i32)
}

/// Whether the request filters by create or mod revision.
pub(crate) fn revision_filters(r: &RangeRequest) -> bool {
    r.min_mod_revision != 0
        || r.max_mod_revision != 0
        || r.min_create_revision != 0
        || r.max_create_revision != 0
}

/// How many keys, in key order, etcd reads to answer `r` (its `rangeLimit`): the limit and one
/// more (to tell `more`), or every key (`None`) when the answer is sorted otherwise or
/// filtered. A sort target without an order counts as key order here (as in etcd): such a
/// Range sorts only the first keys of the range, not the whole range.
pub(crate) fn read_limit(r: &RangeRequest) -> Option<usize> {
    if r.limit <= 0 || !default_ordering(r) || revision_filters(r) {
        return None;
    }
    usize::try_from(r.limit).ok()?.checked_add(1)
}

/// The answer to `r` from the keys it names, `kvs` in key order (all of them, or at least
/// [`read_limit`] of them), and `total`, how many keys the range holds.
pub(crate) fn shape(r: &RangeRequest, mut kvs: Vec<KeyValue>, total: i64) -> Shaped {
    if r.count_only {
        return Shaped {
            kvs: Vec::new(),
            more: false,
            count: total,
        };
    }
    let keep = |kv: &KeyValue| {
        (r.max_mod_revision == 0 || kv.mod_revision <= r.max_mod_revision)
            && (r.min_mod_revision == 0 || kv.mod_revision >= r.min_mod_revision)
            && (r.max_create_revision == 0 || kv.create_revision <= r.max_create_revision)
            && (r.min_create_revision == 0 || kv.create_revision >= r.min_create_revision)
    };
    kvs.retain(keep);
    sort(r, &mut kvs);
    let mut more = false;
    if let Ok(limit) = usize::try_from(r.limit) {
        if limit > 0 && kvs.len() > limit {
            kvs.truncate(limit);
            more = true;
        }
    }
    if r.keys_only {
        for kv in &mut kvs {
            kv.value.clear();
        }
    }
    Shaped {
        kvs,
        more,
        count: total,
    }
}

/// Sorts `kvs` (in key order) as `r` asks: a target other than KEY without an order sorts
/// ascending. Keys that tie keep their key order (etcd's sort is not stable: its order of
/// ties is unspecified).
fn sort(r: &RangeRequest, kvs: &mut [KeyValue]) {
    let mut order = r.sort_order;
    if r.sort_target != SortTarget::Key as i32 && order == SortOrder::None as i32 {
        order = SortOrder::Ascend as i32;
    }
    let target = SortTarget::try_from(r.sort_target).unwrap_or(SortTarget::Key);
    let by = |a: &KeyValue, b: &KeyValue| match target {
        SortTarget::Key => a.key.cmp(&b.key),
        SortTarget::Version => a.version.cmp(&b.version),
        SortTarget::Create => a.create_revision.cmp(&b.create_revision),
        SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
        SortTarget::Value => a.value.cmp(&b.value),
    };
    if order == SortOrder::Ascend as i32 && target != SortTarget::Key {
        kvs.sort_by(by);
    } else if order == SortOrder::Descend as i32 {
        kvs.sort_by(|a, b| by(b, a));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::kv;

    fn keys(s: &Shaped) -> Vec<String> {
        s.kvs
            .iter()
            .map(|kv| String::from_utf8(kv.key.clone()).unwrap())
            .collect()
    }

    fn sample() -> Vec<KeyValue> {
        vec![
            kv("a", "z", 5, 9, 3),
            kv("b", "y", 2, 2, 1),
            kv("c", "x", 7, 7, 1),
        ]
    }

    fn req(target: SortTarget, order: SortOrder, limit: i64) -> RangeRequest {
        RangeRequest {
            sort_target: target as i32,
            sort_order: order as i32,
            limit,
            ..RangeRequest::default()
        }
    }

    #[test]
    fn sorts_by_every_target() {
        use SortOrder::*;
        use SortTarget::*;
        let s = |t, o| keys(&shape(&req(t, o, 0), sample(), 3));
        assert_eq!(s(Key, None), ["a", "b", "c"]);
        assert_eq!(s(Key, Descend), ["c", "b", "a"]);
        assert_eq!(
            s(Create, None),
            ["b", "a", "c"],
            "a target without an order ascends"
        );
        assert_eq!(s(Create, Descend), ["c", "a", "b"]);
        assert_eq!(s(Mod, Ascend), ["b", "c", "a"]);
        assert_eq!(s(Value, Ascend), ["c", "b", "a"]);
        assert_eq!(s(Version, Descend), ["a", "b", "c"], "ties keep key order");
        assert_eq!(s(Version, Ascend), ["b", "c", "a"]);
    }

    #[test]
    fn limit_more_count_and_filters() {
        let first = shape(&req(SortTarget::Create, SortOrder::Ascend, 1), sample(), 3);
        assert_eq!(
            (keys(&first), first.more, first.count),
            (vec!["b".into()], true, 3)
        );
        let all = shape(&req(SortTarget::Key, SortOrder::None, 3), sample(), 3);
        assert!(!all.more);
        let mut filtered = req(SortTarget::Key, SortOrder::None, 0);
        filtered.max_create_revision = 5;
        filtered.min_mod_revision = 3;
        let f = shape(&filtered, sample(), 3);
        assert_eq!(
            (keys(&f), f.count),
            (vec!["a".into()], 3),
            "count ignores filters"
        );
        let mut only = req(SortTarget::Key, SortOrder::None, 1);
        only.count_only = true;
        let c = shape(&only, sample(), 3);
        assert!(c.kvs.is_empty() && !c.more && c.count == 3);
        let mut bare = req(SortTarget::Key, SortOrder::None, 0);
        bare.keys_only = true;
        assert!(shape(&bare, sample(), 3)
            .kvs
            .iter()
            .all(|kv| kv.value.is_empty()));
    }

    #[test]
    fn read_limits() {
        assert_eq!(
            read_limit(&req(SortTarget::Key, SortOrder::None, 2)),
            Some(3)
        );
        assert_eq!(
            read_limit(&req(SortTarget::Key, SortOrder::Ascend, 2)),
            Some(3)
        );
        assert_eq!(
            read_limit(&req(SortTarget::Key, SortOrder::Descend, 2)),
            None
        );
        // A target without an order reads in key order first (etcd's rangeLimit): only the
        // first keys are sorted.
        assert_eq!(
            read_limit(&req(SortTarget::Create, SortOrder::None, 2)),
            Some(3)
        );
        assert_eq!(
            read_limit(&req(SortTarget::Create, SortOrder::Ascend, 2)),
            None
        );
        assert_eq!(read_limit(&req(SortTarget::Key, SortOrder::None, 0)), None);
        let mut filtered = req(SortTarget::Key, SortOrder::None, 2);
        filtered.min_create_revision = 1;
        assert_eq!(read_limit(&filtered), None);
    }
}
