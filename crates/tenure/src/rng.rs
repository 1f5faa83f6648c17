//! tenure's own randomness (a follower's jitter, a semaphore's first permit): one generator per
//! thread, seeded from entropy, which a deterministic simulation may seed to replay a schedule.

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use std::cell::RefCell;

thread_local! {
    static RNG: RefCell<StdRng> = RefCell::new(StdRng::from_entropy());
}

/// Seeds this thread's generator, so that a simulation on a current-thread runtime replays the
/// same jitter and permit choices. Not part of the stable API.
#[doc(hidden)]
pub fn seed_thread_rng(seed: u64) {
    RNG.with(|rng| *rng.borrow_mut() = StdRng::seed_from_u64(seed));
}

pub(crate) fn next_u64() -> u64 {
    RNG.with(|rng| rng.borrow_mut().next_u64())
}

pub(crate) fn next_u32() -> u32 {
    RNG.with(|rng| rng.borrow_mut().next_u32())
}
