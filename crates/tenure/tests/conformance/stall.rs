//! A holder stopped inside its own transaction (SIGSTOP, a paused VM) holds the lease row's
//! lock. PostgreSQL and MariaDB end such a session after the store's timeout, so the others
//! are not blocked for as long as the holder is stopped. (SQLite cannot: a process stopped
//! inside its write transaction blocks every writer until it resumes or dies; see "A holder
//! stopped inside its transaction" in docs/guides/databases.md.)

macro_rules! stall_tests {
    ($module:ident, $backend:ty, $kind:expr, $param:literal) => {
        mod $module {
            use crate::common;
            use crate::ops::campaign;
            use std::sync::Arc;
            use std::time::Duration;
            use tenure::backend::Backend;
            use tenure::{Effect, Store};
            use tokio::time::Instant;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_stalled_holder_transaction_is_ended_by_the_server() {
                if common::store($kind).await.is_none() {
                    return;
                }
                // The store's timeout, after which the server ends a stalled session. 2 s, not
                // 500 ms: every call of this test (the first campaign, each attempt of "b")
                // runs under it too, and a loaded machine missed 500 ms now and then. The bound
                // on the block stays ten of them: far below "as long as the holder is
                // stopped", which here is forever.
                let timeout = Duration::from_secs(2);
                let options = common::options().timeout(timeout);
                let url = common::url_for($kind);
                let backend = Arc::new(<$backend>::connect(&url, &options).await.unwrap());
                backend.migrate().await.unwrap();
                let store = Store::from_backend(backend.clone(), timeout);
                let name = common::unique("stall");
                campaign(&store, &name, "a", 300).await;

                // "a" stops in the middle of its next renewal, holding the row lock (in a
                // transaction begun as tenure begins its own: behind a transaction pooler the
                // server's timeouts are set there, per transaction).
                let mut stalled = backend.begin().await.unwrap();
                sqlx::query(&format!(
                    "SELECT term FROM tenure_lease WHERE name = {} FOR UPDATE",
                    $param
                ))
                .persistent(false)
                .bind(&name)
                .fetch_one(&mut *stalled)
                .await
                .unwrap();

                let started = Instant::now();
                loop {
                    let op = tenure::Op::Campaign {
                        candidate: "b".into(),
                        term: None,
                        ttl_ms: 60_000,
                        metadata: None,
                        purpose: tenure::Purpose::Election,
                    };
                    let last = match store.apply(&name, &op, "b").await {
                        Ok(applied) if matches!(applied.effect, Effect::Acquired { .. }) => {
                            assert_eq!(applied.lease.unwrap().term, 2);
                            break;
                        }
                        Ok(applied) => format!("{:?}", applied.effect),
                        Err(e) => e.to_string(),
                    };
                    // An attempt that timed out on the client may still have been granted: the
                    // server ended the stalled session, the waiting campaign went on and
                    // committed as the client gave up. Its answer is lost (doubt: "b" does not
                    // lead), and each later campaign, naming no term, finds the lease held by
                    // "b" until it expires. The row says whether the lock stopped blocking.
                    let row = store.get(&name).await.ok().and_then(|s| {
                        let now = s.now;
                        s.leases
                            .into_iter()
                            .find(|l| l.live_holder(now) == Some("b"))
                    });
                    if let Some(granted) = row {
                        assert_eq!(granted.term, 2);
                        eprintln!(
                            "{:?}: granted to an attempt whose answer was lost ({last})",
                            $kind
                        );
                        break;
                    }
                    assert!(
                        started.elapsed() < timeout * 10,
                        "the stalled holder's lock still blocks the others (last answer: {last})"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                eprintln!("{:?}: blocked for {:?}", $kind, started.elapsed());
                assert!(
                    stalled.commit().await.is_err(),
                    "the server ended the stalled session"
                );
            }
        }
    };
}

pub(crate) use stall_tests;
