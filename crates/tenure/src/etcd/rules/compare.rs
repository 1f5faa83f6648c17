//! A Txn's compares, as etcd's `applyCompare` evaluates them: each over every key its range
//! names, read before any of the Txn's writes.

use crate::etcd::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::etcd::proto::etcdserverpb::Compare;
use crate::etcd::proto::mvccpb::KeyValue;
use std::cmp::Ordering;

/// Whether `compare` holds for the keys its range names, `kvs` (the keys as they are).
///
/// No key: a VALUE compare fails (etcd cannot tell a missing value from an empty one); every
/// other target compares the zero of its kind (so `CREATE = 0` means "absent"). Several keys:
/// it holds when it holds for each.
pub(crate) fn holds(compare: &Compare, kvs: &[KeyValue]) -> bool {
    if kvs.is_empty() {
        return compare.target != CompareTarget::Value as i32
            && holds_for(compare, &KeyValue::default());
    }
    kvs.iter().all(|kv| holds_for(compare, kv))
}

/// Whether `compare` holds for one key (etcd's `compareKV`): an unknown target compares as
/// equal, an unknown result holds, and a target value of the wrong kind counts as zero.
fn holds_for(compare: &Compare, kv: &KeyValue) -> bool {
    use CompareTarget::{Create, Lease, Mod, Value, Version};
    let target = CompareTarget::try_from(compare.target);
    let wanted = match (target, compare.target_union.as_ref()) {
        (Ok(Version), Some(TargetUnion::Version(n)))
        | (Ok(Create), Some(TargetUnion::CreateRevision(n)))
        | (Ok(Mod), Some(TargetUnion::ModRevision(n)))
        | (Ok(Lease), Some(TargetUnion::Lease(n))) => *n,
        _ => 0,
    };
    let ordering = match target {
        Ok(Value) => {
            let value = match compare.target_union.as_ref() {
                Some(TargetUnion::Value(v)) => v.as_slice(),
                _ => &[],
            };
            kv.value.as_slice().cmp(value)
        }
        Ok(Version) => kv.version.cmp(&wanted),
        Ok(Create) => kv.create_revision.cmp(&wanted),
        Ok(Mod) => kv.mod_revision.cmp(&wanted),
        Ok(Lease) => kv.lease.cmp(&wanted),
        Err(_) => Ordering::Equal,
    };
    match CompareResult::try_from(compare.result) {
        Ok(CompareResult::Equal) => ordering == Ordering::Equal,
        Ok(CompareResult::NotEqual) => ordering != Ordering::Equal,
        Ok(CompareResult::Greater) => ordering == Ordering::Greater,
        Ok(CompareResult::Less) => ordering == Ordering::Less,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmp(target: CompareTarget, result: CompareResult, union: TargetUnion) -> Compare {
        Compare {
            result: result as i32,
            target: target as i32,
            key: b"k".to_vec(),
            range_end: Vec::new(),
            target_union: Some(union),
        }
    }

    fn kv(value: &str, create: i64, modified: i64, version: i64, lease: i64) -> KeyValue {
        KeyValue {
            lease,
            ..super::super::kv("k", value, create, modified, version)
        }
    }

    #[test]
    fn every_target_and_result() {
        use CompareResult::*;
        use CompareTarget::*;
        let k = [kv("b", 3, 5, 2, 7)];
        assert!(holds(
            &cmp(Create, Equal, TargetUnion::CreateRevision(3)),
            &k
        ));
        assert!(holds(&cmp(Mod, Greater, TargetUnion::ModRevision(4)), &k));
        assert!(holds(&cmp(Version, Less, TargetUnion::Version(3)), &k));
        assert!(holds(&cmp(Lease, NotEqual, TargetUnion::Lease(8)), &k));
        assert!(holds(
            &cmp(Value, Greater, TargetUnion::Value(b"a".to_vec())),
            &k
        ));
        assert!(holds(
            &cmp(Value, Less, TargetUnion::Value(b"ba".to_vec())),
            &k
        ));
        assert!(!holds(
            &cmp(Value, Equal, TargetUnion::Value(b"a".to_vec())),
            &k
        ));
        // A union of the wrong kind compares against zero.
        assert!(holds(&cmp(Create, Greater, TargetUnion::Lease(100)), &k));
        // Unknown target: equal; unknown result: holds.
        let mut odd = cmp(Create, Equal, TargetUnion::CreateRevision(9));
        odd.target = 42;
        assert!(holds(&odd, &k));
        odd.target = Create as i32;
        odd.result = 42;
        assert!(holds(&odd, &k));
    }

    #[test]
    fn absent_keys_and_ranges() {
        use CompareResult::*;
        use CompareTarget::*;
        // Absent: CREATE = 0 and VERSION = 0 hold, a VALUE compare never does.
        assert!(holds(
            &cmp(Create, Equal, TargetUnion::CreateRevision(0)),
            &[]
        ));
        assert!(holds(&cmp(Version, Equal, TargetUnion::Version(0)), &[]));
        assert!(!holds(
            &cmp(Value, Equal, TargetUnion::Value(Vec::new())),
            &[]
        ));
        assert!(!holds(
            &cmp(Value, NotEqual, TargetUnion::Value(b"x".to_vec())),
            &[]
        ));
        // A range holds only when every key does.
        let two = [kv("a", 1, 1, 1, 0), kv("b", 2, 4, 3, 0)];
        assert!(holds(&cmp(Mod, Greater, TargetUnion::ModRevision(0)), &two));
        assert!(!holds(
            &cmp(Mod, Greater, TargetUnion::ModRevision(1)),
            &two
        ));
    }
}
