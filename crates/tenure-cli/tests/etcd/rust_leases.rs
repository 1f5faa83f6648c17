//! The Rust `etcd-client`, side by side. Leases: grants (TTL ≤ 0 raised, too large refused, a given id), TimeToLive, Leases, Revoke, and the KeepAlive stream.

use crate::side_by_side;
use crate::support::etcd::*;
use etcd_client::{GetOptions, LeaseGrantOptions, LeaseTimeToLiveOptions, PutOptions};

side_by_side!(leases, keep_alive_stream);

fn leases(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        let chosen = c.lease_grant(30, None).await.expect("grant");
        t.alias(chosen.id().to_string(), "CHOSEN");
        t.record(
            "grant 30",
            format!("ttl {} {}", chosen.ttl(), chosen.error()),
        );
        let given = c
            .lease_grant(40, Some(LeaseGrantOptions::new().with_id(0x1234)))
            .await
            .expect("grant with id");
        t.record(
            "grant with id",
            format!("{:x} ttl {}", given.id(), given.ttl()),
        );
        t.record(
            "the same id again",
            c.lease_grant(40, Some(LeaseGrantOptions::new().with_id(0x1234)))
                .await
                .map_or_else(failure, |_| "granted".into()),
        );
        t.record(
            "ttl too large",
            c.lease_grant(9_000_000_001, None)
                .await
                .map_or_else(failure, |_| "granted".into()),
        );
        for ttl in [0, -5, 1] {
            let small = c
                .lease_grant(ttl, None)
                .await
                .expect("a small ttl is raised to the minimum");
            t.alias(small.id().to_string(), format!("SMALL{ttl}"));
            t.record(&format!("grant {ttl}"), format!("ttl {}", small.ttl()));
            c.lease_revoke(small.id()).await.expect("revoke");
        }
        c.put("l/1", "v", Some(PutOptions::new().with_lease(0x1234)))
            .await
            .expect("put");
        c.put("l/2", "v", Some(PutOptions::new().with_lease(0x1234)))
            .await
            .expect("put");
        let ttl = c
            .lease_time_to_live(0x1234, Some(LeaseTimeToLiveOptions::new().with_keys()))
            .await
            .expect("ttl");
        assert!((35..=40).contains(&ttl.ttl()), "{}", ttl.ttl());
        // etcd lists a lease's keys in a Go map's order (random); tenure in key order.
        let mut keys: Vec<String> = ttl
            .keys()
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        keys.sort();
        t.record(
            "time to live",
            format!("granted {} keys {keys:?}", ttl.granted_ttl()),
        );
        let mut ids: Vec<String> = c
            .leases()
            .await
            .expect("leases")
            .leases()
            .iter()
            .map(|l| l.id().to_string())
            .collect();
        ids.sort();
        t.record(
            "leases",
            format!("{} {}", ids.len(), ids.contains(&0x1234.to_string())),
        );
        let revoked = c.lease_revoke(0x1234).await.expect("revoke");
        t.record(
            "revoke: one revision for both keys",
            revision_of(revoked.header()).to_string(),
        );
        t.record(
            "keys gone",
            shows(
                c.get("l/", Some(GetOptions::new().with_prefix()))
                    .await
                    .expect("get")
                    .kvs(),
            ),
        );
        t.record(
            "revoke again",
            c.lease_revoke(0x1234)
                .await
                .map_or_else(failure, |_| "revoked".into()),
        );
        let gone = c
            .lease_time_to_live(0x1234, None)
            .await
            .expect("ttl of a revoked lease");
        t.record(
            "time to live of a revoked",
            format!("ttl {} granted {}", gone.ttl(), gone.granted_ttl()),
        );
        t.record(
            "put with a revoked",
            c.put("x", "y", Some(PutOptions::new().with_lease(0x1234)))
                .await
                .map_or_else(failure, |_| "put".into()),
        );
        t
    })
}

fn keep_alive_stream(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        let lease = c.lease_grant(20, None).await.expect("grant").id();
        t.alias(lease.to_string(), "LEASE");
        // The crate reads the answer to its first keep-alive itself.
        let (mut keeper, mut stream) = c.lease_keep_alive(lease).await.expect("keep alive");
        t.record("keeper", keeper.id().to_string());
        keeper.keep_alive().await.expect("send");
        let first = soon("first", stream.message())
            .await
            .expect("message")
            .expect("an answer");
        t.record("first", format!("{} ttl {}", first.id(), first.ttl()));
        keeper.keep_alive().await.expect("send");
        let again = soon("again", stream.message())
            .await
            .expect("message")
            .expect("an answer");
        t.record("again", format!("{} ttl {}", again.id(), again.ttl()));
        c.lease_revoke(lease).await.expect("revoke");
        // A revoked lease answers TTL 0, and the stream stays open.
        keeper.keep_alive().await.expect("send");
        let revoked = soon("revoked", stream.message())
            .await
            .expect("message")
            .expect("an answer");
        t.record("revoked", format!("{} ttl {}", revoked.id(), revoked.ttl()));
        keeper.keep_alive().await.expect("send");
        let still = soon("still", stream.message())
            .await
            .expect("message")
            .expect("the stream stays open");
        t.record("still open", format!("ttl {}", still.ttl()));
        t
    })
}
