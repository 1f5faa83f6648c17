//! The Rust examples of the guides under `docs/` compile (and, unless marked `no_run`, run) as
//! doc tests, as the README's do (see the end of `lib.rs`). A new page with Rust code gets a
//! line here.

#![cfg(doctest)]

#[doc = include_str!("../../../docs/guides/library.md")]
struct LibraryGuide;

#[doc = include_str!("../../../docs/guides/fencing.md")]
struct FencingGuide;

#[cfg(feature = "etcd")]
#[doc = include_str!("../../../docs/guides/etcd.md")]
struct EtcdGuide;
