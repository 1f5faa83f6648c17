//! Generates etcd's v3 protocol from the .proto files in `proto/` (etcd's own, as the
//! etcd-client crate ships them): protox parses them in Rust, so a build needs no `protoc`;
//! tonic-prost-build writes the prost messages and, with the `server` feature, the services
//! (with `client`, their clients).
//! The parsed definitions are also written out as a `FileDescriptorSet` (`etcd.bin`): the
//! JSON gateway of `tenure serve` reads its paths and message shapes from them.

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
    // Encoded by protox itself, which keeps the options' extensions (`google.api.http`) that
    // prost's `MethodOptions` would drop; without the comments: the gateway needs the shapes,
    // not the prose.
    let mut compiler = protox::Compiler::new(["proto"])?;
    compiler.include_imports(true).include_source_info(false);
    compiler.open_files(PROTOS)?;
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").ok_or("no OUT_DIR")?);
    std::fs::write(out.join("etcd.bin"), compiler.encode_file_descriptor_set())?;
    tonic_prost_build::configure()
        .build_client(std::env::var_os("CARGO_FEATURE_CLIENT").is_some())
        .build_server(std::env::var_os("CARGO_FEATURE_SERVER").is_some())
        .compile_fds(descriptors)?;
    Ok(())
}
