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

/// A schedule's first tick is owed even when its leader is replaced while running it (the
/// audit's case: a handover during the first tick; a crash takes the same path): the next
/// leader runs that tick, not the one after its own now.
pub(crate) async fn schedule_first_tick_survives_a_leader_change(store: Store) {
    let name = unique("sched-first");
    let timing = Timing::from_ttl(Duration::from_secs(2)).unwrap();
    let every = Cadence::Every(Duration::from_millis(500));
    let a = Elector::builder(store.clone(), &name)
        .candidate("a")
        .timing(timing)
        .spawn()
        .unwrap();
    let first_a = timeout(Duration::from_secs(10), a.wait_until_leader())
        .await
        .expect("a leads")
        .unwrap();
    drop(first_a);
    let b = Elector::builder(store.clone(), &name)
        .candidate("b")
        .timing(timing)
        .spawn()
        .unwrap();
    let schedule_a = Schedule::new(store.clone(), &name, every.clone()).unwrap();
    let (started, on_start) = tokio::sync::oneshot::channel::<i64>();
    let started = Arc::new(Mutex::new(Some(started)));
    // `a` starts its first tick and is still running it when it loses the lead: the tick
    // never completes under `a`.
    let a_runs = tokio::spawn(async move {
        let run = schedule_a.run(&a, move |tick, guard| {
            let started = started.lock().unwrap().take();
            async move {
                if let Some(started) = started {
                    let _ = started.send(tick.at_ms);
                }
                guard.lost().await;
                false
            }
        });
        let _ = timeout(Duration::from_secs(20), run).await;
        a.shutdown().await;
    });
    let first = timeout(Duration::from_secs(10), on_start)
        .await
        .expect("a starts its first tick")
        .unwrap();
    store.handover(&name, "b", false, "test").await.unwrap();

    let schedule_b = Schedule::new(store.clone(), &name, every).unwrap();
    let (ran, mut on_run) = tokio::sync::mpsc::unbounded_channel::<i64>();
    let b_runs = schedule_b.run(&b, move |tick, _guard| {
        let _ = ran.send(tick.at_ms);
        async { true }
    });
    let b_first = tokio::select! {
        _ = b_runs => panic!("run only ends with the elector"),
        tick = timeout(Duration::from_secs(10), on_run.recv()) => tick.expect("b runs a tick").unwrap(),
    };
    assert_eq!(
        b_first, first,
        "the new leader runs the first tick that the old one started and never completed"
    );
    b.shutdown().await;
    a_runs.abort();
}
