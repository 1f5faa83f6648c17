//! The Rust `etcd-client`, side by side. KV and Txn: every Range option, puts with prev_kv, deletes, compaction, every compare and nested Txns, etcd's refusals.

use crate::side_by_side;
use crate::support::etcd::*;
use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse,
};

side_by_side!(kv, txn);

fn kv(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        for (k, v) in [
            ("a", "1"),
            ("b", "2"),
            ("c", "3"),
            ("b", "22"),
            ("d", "4"),
            ("a", "11"),
        ] {
            let put = c
                .put(k, v, Some(PutOptions::new().with_prev_key()))
                .await
                .expect("put");
            t.record(
                &format!("put {k}"),
                format!(
                    "{} prev {:?}",
                    revision_of(put.header()),
                    put.prev_key().map(show)
                ),
            );
        }
        let cases: Vec<(&str, GetOptions)> = vec![
            ("all", GetOptions::new().with_all_keys()),
            ("prefix", GetOptions::new().with_prefix()),
            ("range a..c", GetOptions::new().with_range("c")),
            ("from b", GetOptions::new().with_from_key()),
            ("limit 2", GetOptions::new().with_all_keys().with_limit(2)),
            (
                "count only",
                GetOptions::new().with_all_keys().with_count_only(),
            ),
            (
                "keys only",
                GetOptions::new().with_all_keys().with_keys_only(),
            ),
            (
                "at revision 4",
                GetOptions::new().with_all_keys().with_revision(4),
            ),
            (
                "by version desc",
                GetOptions::new()
                    .with_all_keys()
                    .with_sort(SortTarget::Version, SortOrder::Descend),
            ),
            (
                "by create desc",
                GetOptions::new()
                    .with_all_keys()
                    .with_sort(SortTarget::Create, SortOrder::Descend),
            ),
            (
                "by mod asc",
                GetOptions::new()
                    .with_all_keys()
                    .with_sort(SortTarget::Mod, SortOrder::Ascend),
            ),
            (
                "by value desc",
                GetOptions::new()
                    .with_all_keys()
                    .with_sort(SortTarget::Value, SortOrder::Descend),
            ),
            (
                "by key desc, limit 2",
                GetOptions::new()
                    .with_all_keys()
                    .with_sort(SortTarget::Key, SortOrder::Descend)
                    .with_limit(2),
            ),
            (
                "min mod 4",
                GetOptions::new().with_all_keys().with_min_mod_revision(4),
            ),
            (
                "max mod 4",
                GetOptions::new().with_all_keys().with_max_mod_revision(4),
            ),
            (
                "min create 3, max create 3",
                GetOptions::new()
                    .with_all_keys()
                    .with_min_create_revision(3)
                    .with_max_create_revision(3),
            ),
            (
                "serializable",
                GetOptions::new().with_prefix().with_serializable(),
            ),
        ];
        for (what, options) in cases {
            let key = if what == "prefix" { "" } else { "a" };
            let key = if what == "from b" { "b" } else { key };
            match c.get(key, Some(options)).await {
                Ok(got) => t.record(
                    what,
                    format!(
                        "{} count {} more {} [{}]",
                        revision_of(got.header()),
                        got.count(),
                        got.more(),
                        shows(got.kvs())
                    ),
                ),
                Err(e) => t.record(what, failure(e)),
            }
        }
        let gone = c
            .delete(
                "b",
                Some(DeleteOptions::new().with_range("d").with_prev_key()),
            )
            .await
            .expect("delete");
        t.record(
            "delete b..d",
            format!(
                "{} deleted {} [{}]",
                revision_of(gone.header()),
                gone.deleted(),
                shows(gone.prev_kvs())
            ),
        );
        let none = c.delete("zz", None).await.expect("delete");
        t.record(
            "delete nothing",
            format!("{} deleted {}", revision_of(none.header()), none.deleted()),
        );
        for (what, r) in [
            ("empty key", c.get("", None).await.map(|_| ())),
            (
                "future",
                c.get("a", Some(GetOptions::new().with_revision(100)))
                    .await
                    .map(|_| ()),
            ),
        ] {
            t.record(what, r.map_or_else(failure, |()| "answered".into()));
        }
        t.record(
            "ignore_value on absent",
            c.put("zz", "", Some(PutOptions::new().with_ignore_value()))
                .await
                .map_or_else(failure, |_| "answered".into()),
        );
        t.record(
            "ignore_lease",
            c.put("a", "12", Some(PutOptions::new().with_ignore_lease()))
                .await
                .map_or_else(failure, |p| revision_of(p.header()).to_string()),
        );
        let compacted = c.compact(5, None).await;
        t.record(
            "compact 5",
            compacted.map_or_else(failure, |r| revision_of(r.header()).to_string()),
        );
        t.record(
            "get at 4",
            c.get("a", Some(GetOptions::new().with_revision(4)))
                .await
                .map_or_else(failure, |_| "answered".into()),
        );
        t.record(
            "get at 5",
            c.get("a", Some(GetOptions::new().with_revision(5)))
                .await
                .map_or_else(failure, |g| shows(g.kvs())),
        );
        t.record(
            "compact 3",
            c.compact(3, None)
                .await
                .map_or_else(failure, |_| "answered".into()),
        );
        t
    })
}

fn txn(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        let lease = c.lease_grant(60, None).await.expect("grant").id();
        t.alias(lease.to_string(), "LEASE");
        c.put("k", "1", None).await.expect("put");
        c.put("held", "x", Some(PutOptions::new().with_lease(lease)))
            .await
            .expect("put");
        c.put("p/1", "a", None).await.expect("put");
        c.put("p/2", "b", None).await.expect("put");
        let txns: Vec<(&str, Txn)> = vec![
            (
                "version = 1",
                Txn::new()
                    .when([Compare::version("k", CompareOp::Equal, 1)])
                    .and_then([TxnOp::put("k", "2", None), TxnOp::get("k", None)])
                    .or_else([TxnOp::get("nothing", None)]),
            ),
            (
                "value != 2 fails",
                Txn::new()
                    .when([Compare::value("k", CompareOp::NotEqual, "2")])
                    .and_then([TxnOp::put("k", "no", None)])
                    .or_else([TxnOp::delete(
                        "p/1",
                        Some(DeleteOptions::new().with_prev_key()),
                    )]),
            ),
            (
                "create > 0 and mod < 100",
                Txn::new()
                    .when([
                        Compare::create_revision("k", CompareOp::Greater, 0),
                        Compare::mod_revision("k", CompareOp::Less, 100),
                    ])
                    .and_then([TxnOp::get(
                        "",
                        Some(GetOptions::new().with_all_keys().with_keys_only()),
                    )]),
            ),
            (
                "lease equal",
                Txn::new()
                    .when([Compare::lease("held", CompareOp::Equal, lease)])
                    .and_then([TxnOp::put(
                        "held",
                        "y",
                        Some(PutOptions::new().with_ignore_lease()),
                    )]),
            ),
            (
                "lease of a key without one",
                Txn::new()
                    .when([Compare::lease("k", CompareOp::Equal, 0)])
                    .and_then([TxnOp::get("k", None)]),
            ),
            (
                "range compare: every p/ key's value > a",
                Txn::new()
                    .when([Compare::value("p/", CompareOp::Greater, "a").with_prefix()])
                    .and_then([TxnOp::put("range", "yes", None)])
                    .or_else([TxnOp::put("range", "no", None)]),
            ),
            (
                "absent key: version = 0",
                Txn::new()
                    .when([Compare::version("absent", CompareOp::Equal, 0)])
                    .and_then([TxnOp::put("absent", "now", None)]),
            ),
            (
                "only reads: no new revision",
                Txn::new().and_then([TxnOp::get("k", None)]),
            ),
            (
                "nested",
                Txn::new().and_then([TxnOp::txn(
                    Txn::new()
                        .when([Compare::value("k", CompareOp::Equal, "2")])
                        .and_then([TxnOp::put("nested", "1", None)]),
                )]),
            ),
            (
                "duplicate key",
                Txn::new().and_then([TxnOp::put("d", "1", None), TxnOp::put("d", "2", None)]),
            ),
            (
                "delete then put the same key",
                Txn::new().and_then([TxnOp::delete("k", None), TxnOp::put("k", "3", None)]),
            ),
            (
                "too many ops",
                Txn::new().and_then(
                    (0..129)
                        .map(|i| TxnOp::put(format!("many/{i}"), "v", None))
                        .collect::<Vec<_>>(),
                ),
            ),
            (
                "unknown lease",
                Txn::new().and_then([TxnOp::put(
                    "u",
                    "v",
                    Some(PutOptions::new().with_lease(4242)),
                )]),
            ),
        ];
        for (what, txn) in txns {
            match c.txn(txn).await {
                Ok(r) => {
                    let ops: Vec<String> = r
                        .op_responses()
                        .into_iter()
                        .map(|op| match op {
                            TxnOpResponse::Put(p) => format!("put {}", revision_of(p.header())),
                            TxnOpResponse::Get(g) => format!("get [{}]", shows(g.kvs())),
                            TxnOpResponse::Delete(d) => {
                                format!("delete {} [{}]", d.deleted(), shows(d.prev_kvs()))
                            }
                            TxnOpResponse::Txn(n) => {
                                format!("txn {} {}", n.succeeded(), n.op_responses().len())
                            }
                        })
                        .collect();
                    t.record(
                        what,
                        format!("{} {} {ops:?}", revision_of(r.header()), r.succeeded()),
                    );
                }
                Err(e) => t.record(what, failure(e)),
            }
        }
        let all = c
            .get("", Some(GetOptions::new().with_all_keys()))
            .await
            .expect("get");
        t.record("after", shows(all.kvs()));
        t
    })
}
