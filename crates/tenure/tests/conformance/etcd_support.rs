//! What the etcd tests share: each test runs on an etcd of its own — tables under a table
//! prefix of its own on the backend's database (a fresh file on SQLite), so that its revisions
//! start at 1 and its compactions and reaps touch no other test — and drops them when it
//! passes.

use crate::common::{options, unique, url_of};
use tenure::etcd::proto::etcdserverpb::{
    DeleteRangeRequest, LeaseGrantRequest, PutRequest, RangeRequest, ResponseHeader,
};
use tenure::etcd::proto::mvccpb::KeyValue;
use tenure::etcd::Etcd;
use tenure::Store;

/// An etcd of its own on the target of `store`.
pub(crate) struct Scoped {
    pub etcd: Etcd,
    pub url: String,
    pub prefix: String,
}

impl Scoped {
    pub(crate) async fn new(store: Store) -> Scoped {
        let url = url_of(&store);
        store.close().await;
        let prefix = format!("e{}_", unique("").replace('-', "").to_lowercase());
        let store = Store::connect_with(&url, options().table_prefix(prefix.clone()))
            .await
            .expect("a store of its own");
        Scoped {
            etcd: Etcd::new(store).poll_interval(std::time::Duration::from_millis(100)),
            url,
            prefix,
        }
    }

    /// Another store (and handle) on the same tables: another process's.
    pub(crate) async fn another(&self) -> Etcd {
        let store = Store::connect_with(&self.url, options().table_prefix(self.prefix.clone()))
            .await
            .expect("a second store");
        Etcd::new(store).poll_interval(std::time::Duration::from_millis(100))
    }

    pub(crate) fn store(&self) -> &Store {
        self.etcd.store()
    }

    /// Drops the test's tables (and MySQL's routines) on a server, best effort (a leftover
    /// table harms no other test); SQLite's file goes with the test's directory.
    pub(crate) async fn drop_tables(self) {
        if let Err(e) = self.try_drop_tables().await {
            eprintln!("the etcd test's tables {}* stay: {e}", self.prefix);
        }
        self.etcd.store().close().await;
    }

    async fn try_drop_tables(&self) -> Result<(), sqlx::Error> {
        let url = self.url.replace("?pooler=transaction", "");
        crate::common::drop_prefixed(self.store().kind(), &url, &self.prefix).await
    }
}

pub(crate) fn revision(header: &Option<ResponseHeader>) -> i64 {
    header.as_ref().expect("a header").revision
}

pub(crate) async fn put(etcd: &Etcd, key: &str, value: &str) -> i64 {
    put_leased(etcd, key, value, 0).await
}

pub(crate) async fn put_leased(etcd: &Etcd, key: &str, value: &str, lease: i64) -> i64 {
    let put = PutRequest {
        key: key.into(),
        value: value.into(),
        lease,
        ..PutRequest::default()
    };
    revision(&etcd.put(&put).await.unwrap().header)
}

pub(crate) async fn get(etcd: &Etcd, key: &str) -> Option<KeyValue> {
    let got = etcd
        .range(&RangeRequest {
            key: key.into(),
            ..RangeRequest::default()
        })
        .await
        .unwrap();
    got.kvs.into_iter().next()
}

pub(crate) async fn delete(etcd: &Etcd, key: &str) -> i64 {
    let deleted = etcd
        .delete_range(&DeleteRangeRequest {
            key: key.into(),
            range_end: Vec::new(),
            prev_kv: false,
        })
        .await
        .unwrap();
    revision(&deleted.header)
}

pub(crate) async fn grant(etcd: &Etcd, ttl: i64) -> i64 {
    etcd.lease_grant(&LeaseGrantRequest { ttl, id: 0 })
        .await
        .unwrap()
        .id
}

pub(crate) async fn current(etcd: &Etcd) -> i64 {
    etcd.revisions().await.unwrap().revision
}
