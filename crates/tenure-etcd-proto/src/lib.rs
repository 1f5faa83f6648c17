//! etcd's v3 protocol, generated at build time from etcd's own protocol definitions
//! (`proto/`, Apache-2.0, as the etcd-client crate 0.21.1 ships them from etcd's repository):
//! the messages always, the gRPC service traits with the `server` feature, their clients with
//! `client`.
//!
//! - [`etcdserverpb`]: KV, Watch, Lease, Cluster, Maintenance and Auth;
//! - [`mvccpb`]: `KeyValue` and `Event`; [`authpb`]: users and roles;
//! - [`v3lockpb`], [`v3electionpb`]: the Lock and Election services (etcd's recipes served
//!   natively, for jetcd and the Rust `etcd-client`).
//!
//! [`FILE_DESCRIPTOR_SET`] is the same definitions as data (a protobuf `FileDescriptorSet`,
//! with etcd's `google.api.http` annotations): what a reflection library such as
//! `prost-reflect` needs to map the messages to and from etcd's JSON gateway.
//!
//! Why generated here rather than taken from a client crate: etcd-client exposes server traits
//! for the six core services only, not Lock and Election; one build of the definitions gives
//! the library its messages and `tenure serve` its services from the same types.

#![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
#![allow(rust_2018_idioms, unused_qualifications)]

pub mod authpb {
    include!(concat!(env!("OUT_DIR"), "/authpb.rs"));
}

pub mod mvccpb {
    include!(concat!(env!("OUT_DIR"), "/mvccpb.rs"));
}

pub mod etcdserverpb {
    include!(concat!(env!("OUT_DIR"), "/etcdserverpb.rs"));
}

pub mod v3lockpb {
    include!(concat!(env!("OUT_DIR"), "/v3lockpb.rs"));
}

pub mod v3electionpb {
    include!(concat!(env!("OUT_DIR"), "/v3electionpb.rs"));
}

/// etcd's protocol definitions, parsed: an encoded `google.protobuf.FileDescriptorSet` of the
/// files above and what they import (the `google.api.http` annotations carry the JSON
/// gateway's paths).
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/etcd.bin"));
