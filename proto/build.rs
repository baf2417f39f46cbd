//! Generates the protobuf and tonic bindings from `verge/**/*.proto` and `dmi/v1beta1/api.proto`.
//!
//! `protoc` comes from the `protoc-bin-vendored` crate (Google's release binaries shipped
//! on crates.io), so building the workspace needs no system package. `PROTOC` in the
//! environment overrides it.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "verge/message/v1/message.proto",
        "verge/hub/v1/join.proto",
        "verge/hub/v1/hub.proto",
        // KubeEdge's device-management interface (DMI), package `v1beta1`, wire-compatible
        // with KubeEdge v1.23 mappers.
        "dmi/v1beta1/api.proto",
    ];
    for p in &protos {
        println!("cargo:rerun-if-changed={p}");
    }
    println!("cargo:rerun-if-env-changed=PROTOC");
    let mut config = tonic_prost_build::Config::new();
    let protoc = match std::env::var_os("PROTOC") {
        Some(path) => path.into(),
        None => protoc_bin_vendored::protoc_bin_path()?,
    };
    config.protoc_executable(protoc);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Clients are built on a caller-made `Channel` (`EdgeHubClient::new`); without this the
        // generated `connect` constructor would clash with the `Connect` rpc.
        .build_transport(false)
        // prost's codec with small first buffers (`src/codec.rs`): one long-lived call per
        // edge session would otherwise hold 16 KiB of empty buffers in cloudhub.
        .codec_path("crate::codec::Prost")
        .compile_with_config(config, &protos, &["."])?;
    Ok(())
}
