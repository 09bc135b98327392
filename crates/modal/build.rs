//! Compiles `proto/modal_api.proto` and `proto/task_command_router.proto` with protox, a pure Rust protobuf
//! compiler, so building needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/modal_api.proto", "proto/task_command_router.proto"];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
