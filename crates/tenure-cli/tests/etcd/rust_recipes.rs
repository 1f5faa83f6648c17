//! The Rust `etcd-client`, side by side. The Lock and Election services (the crate's lock and election clients), and the cluster: members, status, auth.

use crate::side_by_side;
use crate::support::etcd::*;
use etcd_client::{Client, LockOptions, ResignOptions};
use std::time::Duration;

side_by_side!(lock, election, cluster);

fn lock(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        let lease = c.lease_grant(30, None).await.expect("grant").id();
        alias_lease(&mut t, lease, "LEASE1");
        let held = c
            .lock("my-lock", Some(LockOptions::new().with_lease(lease)))
            .await
            .expect("lock");
        let key = String::from_utf8_lossy(held.key()).into_owned();
        t.record("locked", &key);
        let token = c.get(held.key(), None).await.expect("get").kvs()[0].create_revision();
        t.record("fencing token (create revision)", token.to_string());
        let second_lease = c.lease_grant(30, None).await.expect("grant").id();
        alias_lease(&mut t, second_lease, "LEASE2");
        let mut other = connect(target).await;
        let waiting = tokio::spawn(async move {
            other
                .lock("my-lock", Some(LockOptions::new().with_lease(second_lease)))
                .await
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiting.is_finished(), "the second locker waits");
        c.unlock(held.key()).await.expect("unlock");
        let second = tokio::time::timeout(Duration::from_secs(15), waiting)
            .await
            .expect("the second gets it")
            .expect("task")
            .expect("lock");
        t.record("second locked", String::from_utf8_lossy(second.key()));
        // A holder whose lease is revoked loses the lock to the next.
        let third_lease = c.lease_grant(30, None).await.expect("grant").id();
        alias_lease(&mut t, third_lease, "LEASE3");
        let mut third = connect(target).await;
        let waiting = tokio::spawn(async move {
            third
                .lock("my-lock", Some(LockOptions::new().with_lease(third_lease)))
                .await
        });
        c.lease_revoke(second_lease).await.expect("revoke");
        let got = tokio::time::timeout(Duration::from_secs(15), waiting)
            .await
            .expect("the third gets it")
            .expect("task")
            .expect("lock");
        t.record(
            "third locked after the holder's lease went",
            String::from_utf8_lossy(got.key()),
        );
        t.record(
            "unlock of a key that is gone",
            c.unlock(held.key())
                .await
                .map_or_else(failure, |r| revision_of(r.header()).to_string()),
        );
        t.record(
            "lock with an unknown lease",
            c.lock("other", Some(LockOptions::new().with_lease(77)))
                .await
                .map_or_else(failure, |_| "locked".into()),
        );
        t
    })
}

fn election(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        let a = c.lease_grant(30, None).await.expect("grant").id();
        alias_lease(&mut t, a, "A");
        let won = c
            .campaign("my-election", "alpha", a)
            .await
            .expect("campaign");
        let leader = won.leader().expect("a leader key").clone();
        t.record(
            "a leads",
            format!("{} rev {}", leader.key_str().unwrap_or(""), leader.rev()),
        );
        let now = c.leader("my-election").await.expect("leader");
        t.record("leader", now.kv().map(show).unwrap_or_default());
        let mut observe = c.observe("my-election").await.expect("observe");
        let seen = soon("observe", observe.message())
            .await
            .expect("observe")
            .expect("a leader");
        t.record("observed", seen.kv().map(show).unwrap_or_default());
        c.proclaim(
            "alpha-2",
            Some(etcd_client::ProclaimOptions::new().with_leader(leader.clone())),
        )
        .await
        .expect("proclaim");
        let seen = tokio::time::timeout(Duration::from_secs(10), observe.message())
            .await
            .expect("proclaimed")
            .expect("observe")
            .expect("a leader");
        t.record(
            "observed the proclamation",
            seen.kv().map(show).unwrap_or_default(),
        );
        let b = c.lease_grant(30, None).await.expect("grant").id();
        alias_lease(&mut t, b, "B");
        let mut other = connect(target).await;
        let waiting = tokio::spawn(async move { other.campaign("my-election", "beta", b).await });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiting.is_finished(), "b waits while a leads");
        c.resign(Some(ResignOptions::new().with_leader(leader.clone())))
            .await
            .expect("resign");
        let b_won = tokio::time::timeout(Duration::from_secs(15), waiting)
            .await
            .expect("b leads")
            .expect("task")
            .expect("campaign");
        t.record(
            "b leads",
            b_won
                .leader()
                .map(|l| l.key_str().unwrap_or("").to_string())
                .unwrap_or_default(),
        );
        let seen = tokio::time::timeout(Duration::from_secs(10), observe.message())
            .await
            .expect("observed b")
            .expect("observe")
            .expect("a leader");
        t.record("observed b", seen.kv().map(show).unwrap_or_default());
        t.record(
            "proclaim by a, no longer leader",
            c.proclaim(
                "x",
                Some(etcd_client::ProclaimOptions::new().with_leader(leader)),
            )
            .await
            .map_or_else(failure, |_| "proclaimed".into()),
        );
        t.record(
            "leader of no election",
            c.leader("none")
                .await
                .map_or_else(failure, |r| format!("{:?}", r.kv().map(show))),
        );
        t
    })
}

fn cluster(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        t.alias(target.url(), "ENDPOINT");
        let mut c = connect(target).await;
        let members = c.member_list().await.expect("members");
        t.record("members", members.members().len().to_string());
        t.record(
            "client URLs",
            format!("{:?}", members.members()[0].client_urls()),
        );
        let status = c.status().await.expect("status");
        t.record(
            "status version",
            status.version().starts_with("3.4.").to_string(),
        );
        t.record(
            "leader is a member",
            members
                .members()
                .iter()
                .any(|m| m.id() == status.leader())
                .to_string(),
        );
        t.record(
            "authenticate",
            Client::connect(
                [target.url()],
                Some(etcd_client::ConnectOptions::new().with_user("root", "x")),
            )
            .await
            .map_or_else(failure, |_| "connected".into()),
        );
        t
    })
}
