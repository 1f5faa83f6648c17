//! The end of a belief (a tenure or a held lock): the elector's or keep-alive's signal, or the
//! local deadline read from the clock, whichever comes first. Reading the clock matters after a
//! process pause: the deadline has passed but the task that would fire the signal has not run.

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Whether the belief has ended: `signal` fired or `deadline` has passed.
pub(crate) fn has_ended(signal: &CancellationToken, deadline: &watch::Receiver<Instant>) -> bool {
    signal.is_cancelled() || Instant::now() >= *deadline.borrow()
}

/// Completes when the belief ends: `signal` fires or the current `deadline` passes (renewals
/// move it).
pub(crate) async fn ended(signal: &CancellationToken, deadline: &watch::Receiver<Instant>) {
    let mut deadline = deadline.clone();
    loop {
        let at = *deadline.borrow_and_update();
        // Checked first: a timer already past its instant fires only at the driver's next turn.
        if signal.is_cancelled() || Instant::now() >= at {
            return;
        }
        tokio::select! {
            () = signal.cancelled() => return,
            () = tokio::time::sleep_until(at) => {
                if Instant::now() >= *deadline.borrow() {
                    return;
                }
            }
            changed = deadline.changed() => {
                if changed.is_err() {
                    // The sender is gone with its tenure; the signal fires on that drop.
                    return signal.cancelled().await;
                }
            }
        }
    }
}
