//! Leader-only schedules: a task runs on every tick, on exactly one node.

use crate::elector::{Elector, LeaderGuard};
use crate::error::{Error, Result};
use crate::model::DbTime;
use crate::store::Store;
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

/// When ticks fall.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Cadence {
    /// Every interval, on multiples of it since the Unix epoch.
    Every(Duration),
    /// The instants of a cron expression (UTC, with a seconds field: `0 */5 * * * *`).
    Cron(Box<cron::Schedule>),
}

impl Cadence {
    /// Parses a cron expression.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the expression.
    pub fn cron(expression: &str) -> Result<Cadence> {
        cron::Schedule::from_str(expression)
            .map(|s| Cadence::Cron(Box::new(s)))
            .map_err(|_| Error::Invalid {
                what: "cron expression",
                value: expression.to_string(),
                rule: "must have 6 or 7 fields: sec min hour day-of-month month day-of-week [year]",
            })
    }

    /// The first tick strictly after `t` (milliseconds since the epoch).
    fn after(&self, t: i64) -> Option<i64> {
        match self {
            Cadence::Every(d) => {
                let d = i64::try_from(d.as_millis()).ok()?.max(1);
                t.div_euclid(d).checked_add(1)?.checked_mul(d)
            }
            Cadence::Cron(s) => {
                let at = chrono::DateTime::from_timestamp_millis(t)?;
                s.after(&at).next().map(|next| next.timestamp_millis())
            }
        }
    }
}

/// A tick to run: its scheduled instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tick {
    /// The scheduled instant, milliseconds since the Unix epoch (database clock).
    pub at_ms: i64,
}

impl Tick {
    /// The scheduled instant.
    pub fn at(&self) -> DbTime {
        DbTime(self.at_ms.saturating_mul(1000))
    }
}

/// The next tick as [`Schedule::next`] chose it.
struct Next {
    tick: Tick,
    /// The database's clock at the read.
    now: DbTime,
    /// Chosen without a record behind it: the first tick, or the one after a skipped outage.
    unrecorded: bool,
}

/// Leader-only schedules: a task runs on every tick, on exactly one node.
///
/// Every node runs an [`Elector`] for the schedule's name; the leader runs the ticks. The last
/// completed tick is recorded in `<prefix>tick`, fenced by the leader's term, so a leader
/// change neither skips a tick nor runs a completed one again: the new leader continues after
/// the last *completed* tick, running the missed ones one after another.
///
/// - **Ticks** fall on multiples of the interval since the Unix epoch, or on the instants of a
///   cron expression (UTC, with seconds), by the database's clock. A schedule that has never
///   completed a tick starts with the next tick, as cron would; the leader that chooses it
///   records it at once (the record's last tick becomes the instant just before it), so a
///   leader replaced before completing it leaves it to the next one. The same holds for the
///   tick after a skipped outage.
/// - **Crashes**: a tick whose run was interrupted (the leader died or lost its tenure before it
///   was recorded) is run again by the next leader: at least once for interrupted runs,
///   exactly once for completed ones.
/// - **Outages**: after more than `catch_up` missed ticks, the missed ones are skipped (with a
///   warning) and the schedule resumes at the next tick.
/// - **Pause**: [`Elector::pause`] stops this node from taking part; [`Store::pause`] on the
///   name pauses the schedule cluster-wide.
#[derive(Clone, Debug)]
pub struct Schedule {
    store: Store,
    name: String,
    cadence: Cadence,
    catch_up: u32,
    /// A tick chosen without a record behind it; see [`next_tick`](Schedule::next_tick).
    planned: std::sync::Arc<std::sync::Mutex<Option<i64>>>,
}

impl Schedule {
    /// A schedule named `name` (the same name as its election), running at most 10 missed ticks
    /// after an outage.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name, or an interval below 1 ms or beyond
    /// [`MAX_DURATION`](crate::validate::MAX_DURATION).
    pub fn new(store: Store, name: impl Into<String>, cadence: Cadence) -> Result<Schedule> {
        let name = name.into();
        crate::validate::name(&name)?;
        if let Cadence::Every(d) = cadence {
            crate::validate::duration_ms("interval", d)?;
            if d < Duration::from_millis(1) {
                return Err(Error::Invalid {
                    what: "interval",
                    value: format!("{d:?}"),
                    rule: "must be at least 1ms",
                });
            }
        }
        Ok(Schedule {
            store,
            name,
            cadence,
            catch_up: 10,
            planned: Default::default(),
        })
    }

    /// How many missed ticks to run after an outage (older ones are skipped).
    pub fn catch_up(mut self, ticks: u32) -> Self {
        self.catch_up = ticks;
        self
    }

    /// The next tick to run and the database's clock now (the tick may lie in the future).
    ///
    /// # Errors
    /// Database errors.
    pub async fn next_tick(&self) -> Result<(Tick, DbTime)> {
        let next = self.next().await?;
        Ok((next.tick, next.now))
    }

    /// The next tick, and whether it was chosen without a record behind it.
    async fn next(&self) -> Result<Next> {
        let (last, now) = self.store.last_tick(&self.name).await?;
        let now_ms = now.0.div_euclid(1000);
        let planned_at = |at_ms| Next {
            tick: Tick { at_ms },
            now,
            unrecorded: true,
        };
        let mut planned = self.planned.lock().expect("planned tick");
        // A tick chosen earlier without a record behind it (the first one, or the one after a
        // skipped outage) stays chosen until the record owes it (see `owe`) or has passed it:
        // recomputing it from a later `now` would move it forever.
        if let Some(p) = *planned {
            if last.is_none_or(|l| l < p.saturating_sub(1)) {
                return Ok(planned_at(p));
            }
            *planned = None;
        }
        let upcoming = self.cadence.after(now_ms).unwrap_or(i64::MAX);
        let Some(last) = last else {
            // A new schedule starts with the next tick, as cron would.
            *planned = Some(upcoming);
            return Ok(planned_at(upcoming));
        };
        let next = self.cadence.after(last).unwrap_or(i64::MAX);
        // Count the missed ticks, up to one more than we would catch up on.
        let mut missed = 0u32;
        let mut t = next;
        while t <= now_ms && missed <= self.catch_up {
            missed += 1;
            t = self.cadence.after(t).unwrap_or(i64::MAX);
        }
        if missed > self.catch_up {
            tracing::warn!(name = %self.name, catch_up = self.catch_up, "more missed ticks than catch_up: skipping them");
            *planned = Some(upcoming);
            return Ok(planned_at(upcoming));
        }
        Ok(Next {
            tick: Tick { at_ms: next },
            now,
            unrecorded: false,
        })
    }

    /// Makes a tick chosen without a record behind it owed by every later leader: records
    /// the instant just before it as the schedule's watermark (the record's "last tick"),
    /// fenced by `guard`'s term, so that a leader replaced before completing it (or before
    /// reaching it) leaves it to the next one. `Ok(false)` if the record has moved meanwhile.
    async fn owe(&self, tick: Tick, guard: &LeaderGuard) -> Result<bool> {
        let watermark = tick.at_ms.saturating_sub(1);
        self.store
            .complete_tick(&self.name, guard.candidate(), guard.term(), watermark)
            .await
    }

    /// The next tick for the leader of `guard`, owed by every later leader once chosen;
    /// `None` if the record moved while it was chosen (read it again).
    async fn next_owed(&self, guard: &LeaderGuard) -> Result<Option<(Tick, DbTime)>> {
        let next = self.next().await?;
        if next.unrecorded && !self.owe(next.tick, guard).await? {
            return Ok(None);
        }
        Ok(Some((next.tick, next.now)))
    }

    /// Records `tick` as completed under `guard`'s tenure. Returns `false` if it (or a later
    /// tick) was already recorded.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if `guard`'s tenure has ended in the database; database errors.
    pub async fn complete(&self, tick: Tick, guard: &LeaderGuard) -> Result<bool> {
        self.store
            .complete_tick(&self.name, guard.candidate(), guard.term(), tick.at_ms)
            .await
    }

    /// Runs `task` for every due tick while `elector` leads, until the elector stops. `task`
    /// gets the tick and the tenure's guard (stop when [`Tenure::lost`](crate::guard::Tenure::lost) fires) and returns
    /// whether the tick completed; only completed ticks are recorded.
    ///
    /// The same as [`run_until`](Schedule::run_until) with a shutdown that never comes.
    ///
    /// # Errors
    /// [`Error::Shutdown`] when the elector stops.
    ///
    /// # Cancel safety
    /// As [`run_until`](Schedule::run_until).
    pub async fn run<F, Fut>(&self, elector: &Elector, task: F) -> Result<()>
    where
        F: FnMut(Tick, LeaderGuard) -> Fut,
        Fut: Future<Output = bool>,
    {
        self.run_until(elector, std::future::pending(), task).await
    }

    /// Runs `task` for every due tick while `elector` leads, until `shutdown` completes (then
    /// returns `Ok(())`) or the elector stops. `task` gets the tick and the tenure's guard
    /// (stop when [`Tenure::lost`](crate::guard::Tenure::lost) fires) and returns whether the tick completed; only
    /// completed ticks are recorded.
    ///
    /// `shutdown` is watched while waiting (for the tenure, for the next tick, before a retry)
    /// and checked before every tick, but a running `task` is not interrupted: a task that must
    /// stop early watches its own signal, and a tick it reports completed is still recorded.
    ///
    /// # Errors
    /// [`Error::Shutdown`] when the elector stops.
    ///
    /// # Cancel safety
    /// Cancelling this future drops a running `task`; its tick is not recorded and is run again
    /// by the next leader. Prefer `shutdown`, which lets a running tick finish.
    pub async fn run_until<S, F, Fut>(
        &self,
        elector: &Elector,
        shutdown: S,
        mut task: F,
    ) -> Result<()>
    where
        S: Future<Output = ()>,
        F: FnMut(Tick, LeaderGuard) -> Fut,
        Fut: Future<Output = bool>,
    {
        tokio::pin!(shutdown);
        loop {
            // `biased`: a shutdown that has come wins over work that is ready too.
            let guard = tokio::select! {
                biased;
                () = &mut shutdown => return Ok(()),
                guard = elector.wait_until_leader() => guard?,
            };
            tracing::info!(name = %self.name, term = guard.term(), "leading: running the schedule");
            while !guard.is_lost() {
                let next = tokio::select! {
                    biased;
                    () = &mut shutdown => return Ok(()),
                    next = self.next_owed(&guard) => next,
                };
                let (tick, now) = match next {
                    Ok(Some(next)) => next,
                    Ok(None) => continue, // the record moved: read it again
                    Err(e) => {
                        tracing::warn!(name = %self.name, error = %e, "cannot read the schedule; retrying");
                        tokio::select! {
                            biased;
                            () = &mut shutdown => return Ok(()),
                            () = tokio::time::sleep(Duration::from_secs(1)) => {}
                            () = guard.lost() => {}
                        }
                        continue;
                    }
                };
                let ahead = tick.at().0.saturating_sub(now.0);
                let wait = Duration::from_micros(u64::try_from(ahead).unwrap_or(0));
                if !wait.is_zero() {
                    tokio::select! {
                        biased;
                        () = &mut shutdown => return Ok(()),
                        () = tokio::time::sleep(wait) => {}
                        () = guard.lost() => {}
                    }
                    continue; // read the clock and the record again
                }
                if !task(tick, guard.clone()).await {
                    continue;
                }
                match self.complete(tick, &guard).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(name = %self.name, tick = tick.at_ms, "tick was already recorded")
                    }
                    Err(e) => {
                        tracing::warn!(name = %self.name, tick = tick.at_ms, error = %e, "cannot record the tick; it may run again")
                    }
                }
            }
            tracing::warn!(name = %self.name, "leadership lost: campaigning again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_ticks_fall_on_multiples() {
        let every = Cadence::Every(Duration::from_secs(5));
        assert_eq!(every.after(0), Some(5_000));
        assert_eq!(every.after(4_999), Some(5_000));
        assert_eq!(every.after(5_000), Some(10_000));
        // An interval that does not fit the arithmetic has no next tick; it never wraps.
        assert_eq!(Cadence::Every(Duration::MAX).after(5_000), None);
        let century = Cadence::Every(crate::validate::MAX_DURATION);
        assert_eq!(century.after(i64::MAX - 1), None);
    }

    #[test]
    fn cron_ticks() {
        let cron = Cadence::cron("0 */5 * * * *").unwrap();
        // 2026-11-22T03:02:00Z → the next is 03:05:00Z.
        let t = chrono::DateTime::parse_from_rfc3339("2026-11-22T03:02:00Z")
            .unwrap()
            .timestamp_millis();
        let next = cron.after(t).unwrap();
        assert_eq!(next - t, 3 * 60_000);
        let err = Cadence::cron("every five minutes").unwrap_err().to_string();
        assert!(err.contains("cron expression"), "{err}");
    }
}
