//! Terms at the end of an epoch (issue 27): the last term of the database's current epoch is
//! minted, and after it nothing — no wrapped, no reused term — with nothing written.

use crate::common::{raw_sql, unique};
use crate::ops::campaign;
use tenure::{Error, Op, Purpose, Store};

/// Sets the term of `name`'s row outside tenure (the test database is never near the end).
async fn set_term(store: &Store, name: &str, term: u64) {
    raw_sql(
        store,
        &format!("UPDATE tenure_lease SET term = {term} WHERE name = '{name}'"),
    )
    .await;
}

pub(crate) async fn terms_end_with_their_epoch(store: Store) {
    let name = unique("epoch-end");
    let first = campaign(&store, &name, "a", 60_000).await;
    let epoch = first.epoch;
    assert!(first.lease_term() >= epoch.floor().max(1));
    store
        .release(&name, "a", first.lease_term(), std::time::Duration::ZERO)
        .await
        .unwrap();
    let last = epoch.end() - 1;
    // The last term of the epoch is minted...
    set_term(&store, &name, last - 1).await;
    let minted = campaign(&store, &name, "b", 60_000).await;
    assert_eq!(minted.lease_term(), last);
    store
        .release(&name, "b", last, std::time::Duration::ZERO)
        .await
        .unwrap();
    // ...and after it nothing: a campaign and an immediate handover are refused, one line
    // that names the lease, and the row is as it was.
    let before = store.get(&name).await.unwrap().leases;
    let refused = store
        .apply(
            &name,
            &Op::Campaign {
                candidate: "c".into(),
                term: None,
                ttl_ms: 60_000,
                metadata: None,
                purpose: Purpose::Election,
            },
            "c",
        )
        .await;
    match refused {
        Err(Error::TermsExhausted {
            name: n,
            term,
            epoch_floor,
        }) => {
            assert_eq!(
                (n.as_str(), term, epoch_floor),
                (name.as_str(), last, epoch.floor())
            );
        }
        other => panic!("a campaign after the epoch's last term: {other:?}"),
    }
    let handover = store.handover(&name, "d", true, "admin").await;
    assert!(
        matches!(handover, Err(Error::TermsExhausted { .. })),
        "{handover:?}"
    );
    assert_eq!(store.get(&name).await.unwrap().leases, before);
    let message = Error::TermsExhausted {
        name: name.clone(),
        term: last,
        epoch_floor: epoch.floor(),
    }
    .to_string();
    assert!(
        message.contains(&name) && !message.contains('\n'),
        "{message}"
    );
}

trait LeaseTerm {
    fn lease_term(&self) -> u64;
}

impl LeaseTerm for tenure::Applied {
    fn lease_term(&self) -> u64 {
        self.lease.as_ref().expect("a row").term
    }
}
