//! CUDA IPC between two processes on one GPU (`stoker_kernels::ipc`), the
//! layer under the device handoff from a local GPU worker: this process
//! queues a write into a device buffer and records an interprocess event
//! after it, without waiting; a second process (this test binary again,
//! running the ignored `ipc_reader`) opens both, makes its own stream wait
//! on the event, reads the buffer and checks every byte. (The copy comes
//! from pageable memory and has most likely finished before the reader
//! starts: the test shows that handles and events work across processes,
//! not the ordering under a write still in flight.)
//! The reader also checks the refusals: a forged handle, a length past the
//! allocation, a handle of the wrong size. Without a GPU it prints
//! `skipped: <reason>`.

use std::process::Command;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, sys};
use stoker_kernels::ipc::{HANDLE_BYTES, IpcError, MappedBuffer, MappedEvent, SharedBuffer, SharedEvent, device_uuid};

const LEN: usize = 8 << 20;
const ENV: &str = "STOKER_IPC_READER";

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 9)) as u8
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn context() -> Result<(Arc<CudaContext>, Arc<CudaStream>), String> {
    let ctx = stoker_kernels::runtime::open_context(0).map_err(|e| e.to_string())?;
    let stream = ctx.new_stream().map_err(|e| e.to_string())?;
    Ok((ctx, stream))
}

#[test]
fn ipc_a_buffer_and_its_event_reach_another_process() {
    let (ctx, stream) = match context() {
        Ok(c) => c,
        Err(reason) => {
            println!("skipped: ipc_a_buffer_and_its_event_reach_another_process: {reason}");
            return;
        }
    };
    let uuid = device_uuid(&ctx).unwrap();
    assert!(uuid.starts_with("GPU-") && uuid.len() == 40, "{uuid}");
    let buffer = SharedBuffer::new(&ctx, LEN).unwrap();
    let event = SharedEvent::new(&ctx).unwrap();
    let host: Vec<u8> = (0..LEN).map(pattern).collect();
    // Queued, not waited for: the reader must see it through the event.
    // SAFETY: `host` stays alive (and unchanged) until the reader has
    // finished, after the copy; the buffer holds LEN bytes.
    unsafe {
        sys::cuMemcpyHtoDAsync_v2(buffer.device_ptr(), host.as_ptr().cast(), LEN, stream.cu_stream())
            .result()
            .unwrap();
    }
    event.record(&stream).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "ipc::ipc_reader",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(
            ENV,
            format!("{} {} {uuid}", hex(&buffer.handle()), hex(&event.handle())),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "reader failed: {stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("ipc reader: {LEN} bytes as written")),
        "{stdout}\n{stderr}"
    );
    println!(
        "{}",
        stdout
            .lines()
            .filter_map(|l| l.find("ipc reader:").map(|i| &l[i..]))
            .collect::<Vec<_>>()
            .join("\n")
    );
    stream.synchronize().unwrap();
    drop(host);
}

/// The other process of the test above (run by it, with the handles in
/// the environment).
#[test]
#[ignore = "the reading process of ipc_a_buffer_and_its_event_reach_another_process, which runs it"]
fn ipc_reader() {
    let spec = std::env::var(ENV).expect("run by ipc_a_buffer_and_its_event_reach_another_process");
    let parts: Vec<&str> = spec.split(' ').collect();
    let (mem, ev, uuid) = (unhex(parts[0]), unhex(parts[1]), parts[2]);
    let (ctx, stream) = context().unwrap();
    assert_eq!(device_uuid(&ctx).unwrap(), uuid, "both processes on one gpu");
    let mapped = MappedBuffer::open(&ctx, &mem, LEN).unwrap();
    let event = MappedEvent::open(&ctx, &ev).unwrap();
    event.wait_on(&stream).unwrap();
    let mut host = vec![0u8; LEN];
    // SAFETY: `host` holds LEN bytes and outlives the copy (synchronized
    // below); the mapping holds at least LEN bytes (checked when opened).
    unsafe {
        sys::cuMemcpyDtoHAsync_v2(host.as_mut_ptr().cast(), mapped.device_ptr(), LEN, stream.cu_stream())
            .result()
            .unwrap();
    }
    stream.synchronize().unwrap();
    let wrong = (0..LEN).filter(|&i| host[i] != pattern(i)).count();
    assert_eq!(wrong, 0, "{wrong} bytes differ from what the writer queued");
    println!("ipc reader: {LEN} bytes as written, read on a stream that waited on the writer's event");

    drop(mapped);

    // Refusals, each an error naming its cause, none a crash.
    let past = MappedBuffer::open(&ctx, &mem, LEN + 1).unwrap_err();
    assert!(
        matches!(past, IpcError::TooShort { asked, .. } if asked == LEN + 1),
        "{past}"
    );
    let mut forged = mem.clone();
    for b in forged.iter_mut().skip(8) {
        *b ^= 0x5a;
    }
    let refused = MappedBuffer::open(&ctx, &forged, 16).unwrap_err();
    assert!(
        matches!(
            refused,
            IpcError::Call {
                call: "cuIpcOpenMemHandle",
                ..
            }
        ),
        "{refused}"
    );
    let refused_event = MappedEvent::open(&ctx, &[0u8; HANDLE_BYTES]).unwrap_err();
    assert!(matches!(refused_event, IpcError::Call { .. }), "{refused_event}");
    assert_eq!(
        MappedBuffer::open(&ctx, &mem[..10], 16).unwrap_err(),
        IpcError::HandleLength(10)
    );
    println!(
        "ipc reader: refused a forged memory handle ({refused}), a zero event handle ({refused_event}) and a length past the buffer ({past})"
    );
}
