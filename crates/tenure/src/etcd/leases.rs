//! Leases on the database's clock, with etcd's semantics (`server/lease/lessor.go`): a grant
//! or keep-alive sets the end to now plus the granted TTL; a lease is gone the moment it ends
//! (a keep-alive answers TTL 0, a Put with it is refused, TimeToLive answers -1); a revoke, and
//! a reap of an ended lease, delete its keys at one revision.

use super::error::{Error, Result};
use super::kv::{delete_keys, header, Writing};
use super::proto::etcdserverpb::{
    LeaseGrantResponse, LeaseKeepAliveResponse, LeaseLeasesResponse, LeaseRevokeResponse,
    LeaseStatus, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
};
use super::rows::{EtcdTx, LeaseRow};
use super::rules::lease::{expiry, granted_ttl, live, remaining};
use crate::model::DbTime;

/// Grants lease `id` (0: one chosen here, positive) for `ttl` seconds at `now`.
pub(super) async fn grant(
    tx: &mut EtcdTx<'_>,
    id: i64,
    ttl: i64,
    now: DbTime,
) -> Result<LeaseGrantResponse> {
    let ttl = granted_ttl(ttl).ok_or(Error::LeaseTtlTooLarge)?;
    let id = if id == 0 { fresh_id(tx).await? } else { id };
    if tx.lease(id, false).await?.is_some() {
        return Err(Error::LeaseExists);
    }
    tx.insert_lease(&LeaseRow {
        id,
        ttl,
        granted_at: now,
        expires_at: expiry(now, ttl),
    })
    .await?;
    Ok(LeaseGrantResponse {
        header: header(tx.read_revision().await?),
        id,
        ttl,
        error: String::new(),
    })
}

/// A random positive id no lease has (as etcd, which takes the next of its request ids).
async fn fresh_id(tx: &mut EtcdTx<'_>) -> Result<i64> {
    loop {
        let id = rand::random::<i64>() & i64::MAX;
        if id != 0 && tx.lease(id, false).await?.is_none() {
            return Ok(id);
        }
    }
}

/// Revokes lease `id` (ended or not, while its row is there): its keys are deleted at one
/// revision, the next (none: the revision stays), and the lease with them.
pub(super) async fn revoke(
    tx: &mut EtcdTx<'_>,
    w: &mut Writing,
    id: i64,
) -> Result<LeaseRevokeResponse> {
    if tx.lease(id, true).await?.is_none() {
        return Err(Error::LeaseNotFound);
    }
    end(tx, w, id).await?;
    Ok(LeaseRevokeResponse {
        header: header(w.seen()),
    })
}

/// Deletes lease `id` and its keys (at `w`'s revision).
async fn end(tx: &mut EtcdTx<'_>, w: &mut Writing, id: i64) -> Result<()> {
    let kvs = tx.kvs_of_lease(id).await?;
    delete_keys(tx, w, kvs).await?;
    tx.delete_lease(id).await?;
    Ok(())
}

/// Renews each of `ids` that lives, by the database's clock, to its TTL from now: one
/// statement where the engine has `UPDATE … RETURNING` (the statement reads the clock), else
/// the clock, the revision, an update and a read. A lease that does not exist or has ended
/// answers TTL 0.
pub(super) async fn keep_alive(
    tx: &mut EtcdTx<'_>,
    ids: &[i64],
) -> Result<Vec<LeaseKeepAliveResponse>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let (renewed, revision) = match tx.renew_leases_now(ids).await? {
        Some((rows, Some(revision))) => (rows, revision),
        Some((rows, None)) => (rows, tx.read_revision().await?),
        None => {
            let now = tx.now().await?;
            let revision = tx.read_revision().await?;
            let rows = tx.renew_leases(ids, now).await?;
            let live: Vec<LeaseRow> = rows
                .into_iter()
                .filter(|r| live(r.expires_at, now))
                .collect();
            (live, revision)
        }
    };
    let by_id: std::collections::HashMap<i64, &LeaseRow> =
        renewed.iter().map(|row| (row.id, row)).collect();
    Ok(ids
        .iter()
        .map(|id| LeaseKeepAliveResponse {
            header: header(revision),
            id: *id,
            ttl: by_id.get(id).map_or(0, |r| r.ttl),
        })
        .collect())
}

/// What lease `r.id` has left at `now` (TTL -1: it does not exist or has ended), with its keys
/// if asked.
pub(super) async fn time_to_live(
    tx: &mut EtcdTx<'_>,
    r: &LeaseTimeToLiveRequest,
    now: DbTime,
    revision: i64,
) -> Result<LeaseTimeToLiveResponse> {
    let Some(row) = tx
        .lease(r.id, false)
        .await?
        .filter(|l| live(l.expires_at, now))
    else {
        return Ok(LeaseTimeToLiveResponse {
            header: header(revision),
            id: r.id,
            ttl: -1,
            granted_ttl: 0,
            keys: Vec::new(),
        });
    };
    let keys = if r.keys {
        tx.kvs_of_lease(r.id)
            .await?
            .into_iter()
            .map(|kv| kv.key)
            .collect()
    } else {
        Vec::new()
    };
    Ok(LeaseTimeToLiveResponse {
        header: header(revision),
        id: r.id,
        ttl: remaining(row.expires_at, now),
        granted_ttl: row.ttl,
        keys,
    })
}

/// The leases that live at `now`, earliest end first.
pub(super) async fn leases(
    tx: &mut EtcdTx<'_>,
    now: DbTime,
    revision: i64,
) -> Result<LeaseLeasesResponse> {
    let leases = tx.live_leases(now).await?;
    Ok(LeaseLeasesResponse {
        header: header(revision),
        leases: leases.iter().map(|l| LeaseStatus { id: l.id }).collect(),
    })
}

/// Ends up to `limit` leases that have ended by `now`, earliest first: each one's keys are
/// deleted at a revision of its own (none if it had none). How many it ended.
pub(super) async fn reap(
    tx: &mut EtcdTx<'_>,
    w: &mut Writing,
    now: DbTime,
    limit: u32,
) -> Result<usize> {
    let ended = tx.ended_leases(now, limit, true).await?;
    for lease in &ended {
        end(tx, w, lease.id).await?;
        w.next();
    }
    Ok(ended.len())
}
