//! Stoker's integration tests: real worker processes, a real S3-compatible
//! server, shards from independent writers. Run them with scripts/test.sh,
//! which installs the S3 server and the Python tools they use.
//!
//! One test binary, declared in `cli/Cargo.toml` (the package that builds
//! the `stoker` binary and the only one that depends on worker and
//! client), with a module per concern.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test, with its location")]

mod faultproxy;
mod support;

mod allow;
mod architecture;
mod bad_input;
mod cli_errors;
mod client_device;
mod cluster;
mod containers;
mod delivery;
mod deploy;
mod detection;
mod detection_formats;
mod discovery;
mod docs;
mod doctor;
mod fidelity;
mod formats;
mod gpu;
mod gpu_chain;
mod gpu_handoff;
mod gpu_parity;
mod gpu_parts;
mod gpu_steps;
mod lifecycle;
mod local;
mod memory;
mod metrics;
mod module_graph;
mod protocol;
// Needs the worker's fault-injection points: --features stoker/failpoints.
#[cfg(feature = "failpoints")]
mod panics;
mod python;
mod python_transforms;
mod ranks;
mod records;
mod s3;
mod s3_faults;
mod s3_tls;
mod shm;
mod soak;
mod tls;
mod torch;
mod transforms;
mod worker_api;
