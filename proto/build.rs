//! Compiles `proto/stoker/v1/stoker.proto` with protox (a pure-Rust protobuf
//! compiler), so building needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/stoker/v1/stoker.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .bytes(".stoker.v1.Sample.pixels")
        .bytes(".stoker.v1.FieldValue.bytes")
        .bytes(".stoker.v1.NpyArray.data")
        .bytes(".stoker.v1.FieldValue.image")
        .bytes(".stoker.v1.Targets.masks")
        .compile_fds(descriptors)?;
    Ok(())
}
