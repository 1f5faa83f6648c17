//! The etcd layer's keys on one backend: Put, Range (every option), DeleteRange and past
//! revisions, with etcd's revisions, versions and errors.

use crate::etcd_support::{current, delete, get, put, revision, Scoped};
use tenure::etcd::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use tenure::etcd::proto::etcdserverpb::{
    CompactionRequest, DeleteRangeRequest, PutRequest, RangeRequest,
};
use tenure::etcd::{Error, MAX_KEY_BYTES};
use tenure::Store;

fn range(key: &str, end: &str) -> RangeRequest {
    RangeRequest {
        key: key.into(),
        range_end: end.into(),
        ..RangeRequest::default()
    }
}

fn keys(kvs: &[tenure::etcd::proto::mvccpb::KeyValue]) -> Vec<String> {
    kvs.iter()
        .map(|kv| String::from_utf8(kv.key.clone()).unwrap())
        .collect()
}

/// Revisions, create and mod revisions and versions as etcd gives them; prev_kv,
/// ignore_value and ignore_lease; the bad puts change nothing.
pub(crate) async fn etcd_put_versions_and_revisions(store: Store) {
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    assert_eq!(current(etcd).await, 1, "a new etcd is at revision 1");
    assert_eq!(put(etcd, "a", "1").await, 2);
    assert_eq!(put(etcd, "b", "1").await, 3);
    let again = etcd
        .put(&PutRequest {
            key: "a".into(),
            value: "2".into(),
            prev_kv: true,
            ..PutRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(revision(&again.header), 4);
    let prev = again.prev_kv.expect("prev_kv");
    assert_eq!(
        (prev.value.as_slice(), prev.mod_revision, prev.version),
        (&b"1"[..], 2, 1)
    );
    let a = get(etcd, "a").await.unwrap();
    assert_eq!(
        (
            a.value.as_slice(),
            a.create_revision,
            a.mod_revision,
            a.version,
            a.lease
        ),
        (&b"2"[..], 2, 4, 2, 0)
    );
    // ignore_value keeps the value and moves the revision and version.
    let kept = PutRequest {
        key: "a".into(),
        ignore_value: true,
        ..PutRequest::default()
    };
    assert_eq!(revision(&etcd.put(&kept).await.unwrap().header), 5);
    let a = get(etcd, "a").await.unwrap();
    assert_eq!(
        (a.value.as_slice(), a.version, a.mod_revision),
        (&b"2"[..], 3, 5)
    );
    // Deleted and put again: a new life, version 1.
    assert_eq!(delete(etcd, "a").await, 6);
    assert_eq!(put(etcd, "a", "3").await, 7);
    let a = get(etcd, "a").await.unwrap();
    assert_eq!((a.create_revision, a.version), (7, 1));
    // Refusals write nothing.
    let missing = PutRequest {
        key: "nope".into(),
        ignore_lease: true,
        ..PutRequest::default()
    };
    assert!(matches!(etcd.put(&missing).await, Err(Error::KeyNotFound)));
    let both = PutRequest {
        key: "a".into(),
        value: "x".into(),
        ignore_value: true,
        ..PutRequest::default()
    };
    assert!(matches!(etcd.put(&both).await, Err(Error::ValueProvided)));
    let leased = PutRequest {
        key: "a".into(),
        lease: 12345,
        ..PutRequest::default()
    };
    assert!(matches!(etcd.put(&leased).await, Err(Error::LeaseNotFound)));
    assert!(matches!(
        etcd.put(&PutRequest::default()).await,
        Err(Error::EmptyKey)
    ));
    let long = PutRequest {
        key: vec![b'k'; MAX_KEY_BYTES + 1],
        ..PutRequest::default()
    };
    assert!(matches!(etcd.put(&long).await, Err(Error::RequestTooLarge)));
    // The longest key is stored and read back, bytes of any value included.
    let mut longest = vec![0xff_u8; MAX_KEY_BYTES];
    longest[0] = 0;
    let put_longest = PutRequest {
        key: longest.clone(),
        value: vec![0, 1, 2],
        ..PutRequest::default()
    };
    assert_eq!(revision(&etcd.put(&put_longest).await.unwrap().header), 8);
    let got = etcd
        .range(&RangeRequest {
            key: longest,
            ..RangeRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(got.kvs[0].value, vec![0, 1, 2]);
    assert_eq!(current(etcd).await, 8);
    s.drop_tables().await;
}

/// Range: one key, prefixes, "from key on", everything; limit, more and count; every sort;
/// the revision filters; count_only and keys_only; an empty or inverted range.
pub(crate) async fn etcd_range_options(store: Store) {
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    // rev 2..=6: a/1, a/2, a/3, b, c; then a/1 again (rev 7), so a/1 has version 2.
    for key in ["a/1", "a/2", "a/3", "b", "c"] {
        put(etcd, key, &format!("v-{key}")).await;
    }
    put(etcd, "a/1", "z").await;
    let all = etcd.range(&range("\0", "\0")).await.unwrap();
    assert_eq!(keys(&all.kvs), ["a/1", "a/2", "a/3", "b", "c"]);
    assert_eq!((all.count, all.more, revision(&all.header)), (5, false, 7));
    let from_b = etcd.range(&range("b", "\0")).await.unwrap();
    assert_eq!(keys(&from_b.kvs), ["b", "c"]);
    let prefix = etcd.range(&range("a/", "a0")).await.unwrap();
    assert_eq!(keys(&prefix.kvs), ["a/1", "a/2", "a/3"]);
    let none = etcd.range(&range("zz", "")).await.unwrap();
    assert!(none.kvs.is_empty() && none.count == 0);
    let inverted = etcd.range(&range("c", "a")).await.unwrap();
    assert!(inverted.kvs.is_empty() && inverted.count == 0);

    let limited = RangeRequest {
        limit: 2,
        ..range("\0", "\0")
    };
    let first = etcd.range(&limited).await.unwrap();
    assert_eq!(
        (keys(&first.kvs), first.more, first.count),
        (vec!["a/1".into(), "a/2".into()], true, 5)
    );
    let sorted = |target: SortTarget, order: SortOrder| RangeRequest {
        sort_target: target as i32,
        sort_order: order as i32,
        ..range("\0", "\0")
    };
    let by_mod = etcd
        .range(&sorted(SortTarget::Mod, SortOrder::Descend))
        .await
        .unwrap();
    assert_eq!(keys(&by_mod.kvs), ["a/1", "c", "b", "a/3", "a/2"]);
    let by_create = etcd
        .range(&sorted(SortTarget::Create, SortOrder::None))
        .await
        .unwrap();
    assert_eq!(keys(&by_create.kvs), ["a/1", "a/2", "a/3", "b", "c"]);
    let by_key = etcd
        .range(&sorted(SortTarget::Key, SortOrder::Descend))
        .await
        .unwrap();
    assert_eq!(keys(&by_key.kvs), ["c", "b", "a/3", "a/2", "a/1"]);
    let by_version = etcd
        .range(&sorted(SortTarget::Version, SortOrder::Descend))
        .await
        .unwrap();
    assert_eq!(keys(&by_version.kvs)[0], "a/1");
    let by_value = etcd
        .range(&sorted(SortTarget::Value, SortOrder::Ascend))
        .await
        .unwrap();
    assert_eq!(keys(&by_value.kvs), ["a/2", "a/3", "b", "c", "a/1"]);
    let last_created = RangeRequest {
        limit: 1,
        ..sorted(SortTarget::Create, SortOrder::Descend)
    };
    let last = etcd.range(&last_created).await.unwrap();
    assert_eq!(
        (keys(&last.kvs), last.more, last.count),
        (vec!["c".into()], true, 5)
    );

    let filtered = RangeRequest {
        min_mod_revision: 4,
        max_create_revision: 5,
        ..range("\0", "\0")
    };
    let f = etcd.range(&filtered).await.unwrap();
    assert_eq!(
        (keys(&f.kvs), f.count),
        (vec!["a/1".into(), "a/3".into(), "b".into()], 5)
    );
    let counted = RangeRequest {
        count_only: true,
        ..range("a/", "a0")
    };
    let c = etcd.range(&counted).await.unwrap();
    assert!(c.kvs.is_empty() && c.count == 3);
    let bare = RangeRequest {
        keys_only: true,
        ..range("a/", "a0")
    };
    let b = etcd.range(&bare).await.unwrap();
    assert!(b.kvs.iter().all(|kv| kv.value.is_empty() && kv.version > 0));
    let bad = RangeRequest {
        sort_target: 9,
        ..range("a", "")
    };
    assert!(matches!(
        etcd.range(&bad).await,
        Err(Error::InvalidSortOption)
    ));
    assert!(matches!(
        etcd.range(&range("", "")).await,
        Err(Error::EmptyKey)
    ));
    s.drop_tables().await;
}

/// DeleteRange: one key, a prefix, prev_kvs, and a delete of nothing, which leaves the
/// revision.
pub(crate) async fn etcd_delete_range(store: Store) {
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    for key in ["p/1", "p/2", "q"] {
        put(etcd, key, "v").await;
    }
    let gone = etcd
        .delete_range(&DeleteRangeRequest {
            key: "p/".into(),
            range_end: "p0".into(),
            prev_kv: true,
        })
        .await
        .unwrap();
    assert_eq!((gone.deleted, revision(&gone.header)), (2, 5));
    assert_eq!(keys(&gone.prev_kvs), ["p/1", "p/2"]);
    let nothing = etcd
        .delete_range(&DeleteRangeRequest {
            key: "p/".into(),
            range_end: "p0".into(),
            prev_kv: true,
        })
        .await
        .unwrap();
    assert_eq!((nothing.deleted, revision(&nothing.header)), (0, 5));
    assert_eq!(
        current(etcd).await,
        5,
        "a delete of nothing leaves the revision"
    );
    let all = etcd.range(&range("\0", "\0")).await.unwrap();
    assert_eq!(keys(&all.kvs), ["q"]);
    s.drop_tables().await;
}

/// A Range at a past revision is answered from the log, keys deleted since included; below
/// the floor it is compacted, above the current revision in the future; a compaction to a
/// revision at or below the floor, or in the future, is refused.
pub(crate) async fn etcd_past_revisions_and_compaction(store: Store) {
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    put(etcd, "k", "1").await; // 2
    put(etcd, "j", "1").await; // 3
    put(etcd, "k", "2").await; // 4
    delete(etcd, "j").await; // 5
    put(etcd, "k", "3").await; // 6
    let at = |revision: i64| RangeRequest {
        revision,
        ..range("\0", "\0")
    };
    let values = |r: &tenure::etcd::proto::etcdserverpb::RangeResponse| -> Vec<String> {
        r.kvs
            .iter()
            .map(|kv| {
                format!(
                    "{}={}@{}",
                    String::from_utf8_lossy(&kv.key),
                    String::from_utf8_lossy(&kv.value),
                    kv.version
                )
            })
            .collect()
    };
    assert!(values(&etcd.range(&at(1)).await.unwrap()).is_empty());
    assert_eq!(values(&etcd.range(&at(2)).await.unwrap()), ["k=1@1"]);
    assert_eq!(
        values(&etcd.range(&at(3)).await.unwrap()),
        ["j=1@1", "k=1@1"]
    );
    assert_eq!(
        values(&etcd.range(&at(4)).await.unwrap()),
        ["j=1@1", "k=2@2"]
    );
    let five = etcd.range(&at(5)).await.unwrap();
    assert_eq!(
        (values(&five), revision(&five.header), five.count),
        (vec!["k=2@2".into()], 6, 1)
    );
    assert_eq!(values(&etcd.range(&at(6)).await.unwrap()), ["k=3@3"]);
    assert!(matches!(
        etcd.range(&at(7)).await,
        Err(Error::FutureRevision)
    ));

    let compact = |revision: i64| CompactionRequest {
        revision,
        physical: false,
    };
    assert!(matches!(
        etcd.compact(&compact(9)).await,
        Err(Error::FutureRevision)
    ));
    let done = etcd.compact(&compact(4)).await.unwrap();
    assert_eq!(
        revision(&done.header),
        6,
        "a compaction does not move the revision"
    );
    assert!(matches!(
        etcd.compact(&compact(4)).await,
        Err(Error::Compacted { floor: 4 })
    ));
    assert!(matches!(
        etcd.compact(&compact(3)).await,
        Err(Error::Compacted { floor: 4 })
    ));
    assert!(matches!(
        etcd.range(&at(3)).await,
        Err(Error::Compacted { floor: 4 })
    ));
    assert_eq!(
        values(&etcd.range(&at(4)).await.unwrap()),
        ["j=1@1", "k=2@2"]
    );
    assert_eq!(values(&etcd.range(&at(5)).await.unwrap()), ["k=2@2"]);
    let revisions = etcd.revisions().await.unwrap();
    assert_eq!((revisions.revision, revisions.floor), (6, 4));
    assert!(matches!(
        etcd.events(3, b"\0", b"\0", 10).await,
        Err(Error::Compacted { floor: 4 })
    ));
    assert_eq!(
        etcd.events(4, b"\0", b"\0", 10).await.unwrap().events.len(),
        3
    );
    // Keep the last revision: the floor moves to 5.
    assert_eq!(etcd.retain(1).await.unwrap(), Some(5));
    assert_eq!(etcd.retain(1).await.unwrap(), None);
    s.drop_tables().await;
}

/// Keys are bytes compared byte for byte on every engine: a trailing space, a zero byte and
/// 0xff make keys of their own, in byte order.
pub(crate) async fn etcd_keys_are_bytes(store: Store) {
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    let keys: [&[u8]; 5] = [b"sp", b"sp ", b"sp\0", b"sp\xff", b"Sp"];
    for (i, key) in keys.iter().enumerate() {
        let put = PutRequest {
            key: key.to_vec(),
            value: vec![u8::try_from(i).unwrap()],
            ..PutRequest::default()
        };
        etcd.put(&put).await.unwrap();
    }
    let found = etcd
        .range(&RangeRequest {
            key: b"sp".to_vec(),
            range_end: b"sq".to_vec(),
            ..RangeRequest::default()
        })
        .await
        .unwrap();
    let order: Vec<&[u8]> = found.kvs.iter().map(|kv| kv.key.as_slice()).collect();
    assert_eq!(order, [&b"sp"[..], b"sp\0", b"sp ", b"sp\xff"]);
    let values: Vec<u8> = found.kvs.iter().map(|kv| kv.value[0]).collect();
    assert_eq!(values, [0, 2, 1, 3], "each its own key");
    let one = etcd
        .range(&RangeRequest {
            key: b"sp ".to_vec(),
            ..RangeRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(one.kvs.len(), 1);
    assert_eq!(one.kvs[0].value, [1]);
    s.drop_tables().await;
}
