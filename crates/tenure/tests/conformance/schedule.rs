//! `Schedule::run` on one backend: each tick once, and a new leader continues after the last
//! recorded tick.

use crate::common::unique;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tenure::{Cadence, Elector, Schedule, Store, Timing};
use tokio::time::timeout;

async fn run_for(store: &Store, name: &str, id: &str, for_how_long: Duration) -> Vec<i64> {
    let elector = Elector::builder(store.clone(), name)
        .candidate(id)
        .timing(Timing::from_ttl(Duration::from_secs(2)).unwrap())
        .spawn()
        .unwrap();
    let schedule = Schedule::new(
        store.clone(),
        name,
        Cadence::Every(Duration::from_millis(200)),
    )
    .unwrap();
    let ticks = Arc::new(Mutex::new(vec![]));
    let seen = ticks.clone();
    let run = schedule.run(&elector, move |tick, guard| {
        assert!(!guard.is_lost());
        seen.lock().unwrap().push(tick.at_ms);
        async { true }
    });
    assert!(
        timeout(for_how_long, run).await.is_err(),
        "run only ends with the elector"
    );
    elector.shutdown().await;
    let ticks = ticks.lock().unwrap().clone();
    ticks
}

pub(crate) async fn schedule_runs_each_tick_once(store: Store) {
    let name = unique("sched");
    let first = run_for(&store, &name, "a", Duration::from_millis(1500)).await;
    assert!(first.len() >= 3, "too few ticks: {first:?}");
    assert!(first.windows(2).all(|w| w[1] - w[0] == 200), "{first:?}");
    // Stopping `run` may interrupt the last tick between its run and its record: then that tick
    // is not recorded (and runs again, at least once for interrupted runs).
    let recorded = store.backend().last_tick(&name).await.unwrap().0.unwrap();
    let last = *first.last().unwrap();
    assert!(
        recorded == last || recorded == last - 200,
        "recorded {recorded}, ran {first:?}"
    );

    // Another node takes over: it continues after the recorded tick, catching up on the ones
    // missed meanwhile, and repeats no recorded one.
    let second = run_for(&store, &name, "b", Duration::from_millis(1000)).await;
    assert!(!second.is_empty());
    assert_eq!(second[0], recorded + 200, "{first:?} then {second:?}");
    assert!(second.windows(2).all(|w| w[1] - w[0] == 200), "{second:?}");
}

pub(crate) async fn schedule_stops_when_asked(store: Store) {
    let name = unique("sched-stop");
    let elector = Elector::builder(store.clone(), &name)
        .candidate("a")
        .timing(Timing::from_ttl(Duration::from_secs(2)).unwrap())
        .spawn()
        .unwrap();
    let schedule = Schedule::new(
        store.clone(),
        &name,
        Cadence::Every(Duration::from_millis(200)),
    )
    .unwrap();
    // The second tick asks to stop: it still completes and is recorded, and no third one runs.
    let stop = tokio_util::sync::CancellationToken::new();
    let ticks = Arc::new(Mutex::new(vec![]));
    let seen = ticks.clone();
    let asked = stop.clone();
    let run = schedule.run_until(&elector, stop.cancelled(), move |tick, _guard| {
        let mut seen = seen.lock().unwrap();
        seen.push(tick.at_ms);
        if seen.len() == 2 {
            asked.cancel();
        }
        async { true }
    });
    let ended = timeout(Duration::from_secs(5), run).await;
    assert!(
        matches!(ended, Ok(Ok(()))),
        "run_until ends with Ok when asked: {ended:?}"
    );
    let ticks = ticks.lock().unwrap().clone();
    assert_eq!(ticks.len(), 2, "{ticks:?}");
    let recorded = store.backend().last_tick(&name).await.unwrap().0.unwrap();
    assert_eq!(
        recorded, ticks[1],
        "the tick that asked to stop is recorded"
    );

    // A shutdown that has already come ends the run before any tick.
    let late = Arc::new(Mutex::new(vec![]));
    let seen = late.clone();
    let run = schedule.run_until(&elector, std::future::ready(()), move |tick, _guard| {
        seen.lock().unwrap().push(tick.at_ms);
        async { true }
    });
    assert!(matches!(
        timeout(Duration::from_secs(1), run).await,
        Ok(Ok(()))
    ));
    assert!(late.lock().unwrap().is_empty(), "no tick after a shutdown");
    elector.shutdown().await;
}
