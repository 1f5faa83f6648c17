//! The room's upkeep, on every server: this member joins the member list and heartbeats
//! (every quarter of the member TTL; listed again if its row lapsed), ended leases are reaped
//! every poll interval (their keys deleted at a revision each: any server may do it, the
//! database serializes them), the log is compacted every minute to the retention, and the
//! gauge of live leases is read every ten seconds. When the server stops, the member leaves.

use super::{Room, Settings};
use crate::serve::metrics;
use std::time::Duration;
use tokio::time::{sleep_until, Instant};

/// How many ended leases one reap removes at most (the next poll takes the rest).
const REAP_BATCH: u32 = 100;
/// How often the log is compacted to the retention.
const COMPACT_EVERY: Duration = Duration::from_secs(60);
/// How often the live leases are counted for their gauge.
const COUNT_EVERY: Duration = Duration::from_secs(10);

/// Runs until the server stops, then leaves the member list (`listed`: the member joined).
pub(super) async fn run(room: Room, settings: Settings, listed: bool) {
    let stopped = room.stopped();
    tokio::select! {
        () = stopped => {}
        () = keep(&room, &settings, listed) => {}
    }
    if let Err(e) = room.etcd().member_leave(room.0.member.id).await {
        tracing::warn!(error = %e, "etcd member could not leave; it lapses after its TTL");
    }
}

/// The upkeep's loop (never ends by itself).
async fn keep(room: &Room, settings: &Settings, mut listed: bool) {
    let etcd = room.etcd();
    let member = room.0.member.to_proto();
    let beat = (settings.member_ttl / 4).max(Duration::from_millis(100));
    let poll = settings.poll.max(Duration::from_millis(10));
    let now = Instant::now();
    let (mut next_beat, mut next_reap, mut next_compact, mut next_count) =
        (now + beat, now, now + COMPACT_EVERY, now);
    loop {
        let now = Instant::now();
        if now >= next_beat {
            let alive = if listed {
                etcd.member_heartbeat(member.id, settings.member_ttl).await
            } else {
                Ok(false)
            };
            listed = match alive {
                Ok(true) => true,
                Ok(false) => match etcd.member_join(&member, settings.member_ttl).await {
                    Ok(_) => true,
                    Err(e) => {
                        tracing::warn!(error = %e, "etcd member could not join");
                        false
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "etcd member heartbeat failed");
                    listed
                }
            };
            next_beat = now + beat;
        }
        if now >= next_reap {
            match etcd.reap(REAP_BATCH).await {
                Ok(reaped) if reaped.leases > 0 => {
                    tracing::debug!(
                        leases = reaped.leases,
                        revision = reaped.revision,
                        "etcd leases ended"
                    );
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "etcd lease reap failed"),
            }
            next_reap = now + poll;
        }
        if now >= next_compact {
            if settings.retention > 0 {
                match etcd.retain(i64::from(settings.retention)).await {
                    Ok(Some(floor)) => tracing::debug!(floor, "etcd log compacted"),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "etcd log compaction failed"),
                }
            }
            next_compact = now + COMPACT_EVERY;
        }
        if now >= next_count {
            if let Ok(leases) = etcd.lease_leases().await {
                metrics::etcd_leases(leases.leases.len());
            }
            next_count = now + COUNT_EVERY;
        }
        sleep_until(next_beat.min(next_reap).min(next_compact).min(next_count)).await;
    }
}
