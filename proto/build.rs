//! Generates the protobuf and tonic bindings from `verge/**/*.proto` with the system `protoc`
//! (Debian's protobuf-compiler; `PROTOC` overrides the path).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["verge/message/v1/message.proto", "verge/hub/v1/hub.proto"];
    for p in &protos {
        println!("cargo:rerun-if-changed={p}");
    }
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Clients are built on a caller-made `Channel` (`EdgeHubClient::new`); without this the
        // generated `connect` constructor would clash with the `Connect` rpc.
        .build_transport(false)
        .compile_protos(&protos, &["."])?;
    Ok(())
}
