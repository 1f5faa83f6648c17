//! Generates etcd's v3 protocol from the .proto files in `proto/` (etcd's own, as the
//! etcd-client crate ships them): protox parses them in Rust, so a build needs no `protoc`;
//! tonic-prost-build writes the prost messages and, with the `server` feature, the services.

const PROTOS: &[&str] = &[
    "etcd/api/authpb/auth.proto",
    "etcd/api/mvccpb/kv.proto",
    "etcd/api/etcdserverpb/rpc.proto",
    "etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
    "etcd/server/etcdserver/api/v3election/v3electionpb/v3election.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(std::env::var_os("CARGO_FEATURE_SERVER").is_some())
        .compile_fds(descriptors)?;
    Ok(())
}
