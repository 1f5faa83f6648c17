//! Fault injection for tenure: node processes on the library, a nemesis that injects real
//! faults (signals, CPU starvation, a TCP proxy, killed sessions, server restarts, wall-clock
//! jumps), a recorded history and a checker of the promises; and etcd's API under faults
//! (`etcdctl lock` holders on `tenure serve`, [`etcd`]). See `docs/safety.md`.

pub mod checker;
pub mod clock;
pub mod dbserver;
pub mod etcd;
pub mod event;
pub mod ha;
pub mod node;
pub mod profile;
pub mod proxy;
pub mod report;
pub mod resource;
pub mod runner;
pub mod scenario;
pub mod target;
