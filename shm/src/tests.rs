use std::io::Write;

use super::*;
use crate::layout::Layout;

fn pixels(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn a_worker_writes_and_the_client_reads_in_place() {
    let ring = Ring::create(4, 1000).unwrap();
    let worker = Attached::open(ring.path(), &ring.nonce()).unwrap();
    assert_eq!(worker.layout(), ring.layout());
    let stream = ring.stream();
    let data = pixels(1000, 7);
    let slot = worker.write(stream.tag(), &data).unwrap();
    assert_eq!(ring.free_slots(), 3);
    let lent = stream.take(slot, data.len()).unwrap();
    assert_eq!(lent.as_ref(), data.as_slice());
    // Taken once only.
    let again = stream.take(slot, data.len()).unwrap_err();
    assert!(again.to_string().contains("not written by this stream"), "{again}");
    drop(lent);
    assert_eq!(ring.free_slots(), 4);
}

#[test]
fn a_full_ring_or_an_oversized_sample_goes_inline() {
    let ring = Ring::create(2, 64).unwrap();
    let worker = Attached::open(ring.path(), &ring.nonce()).unwrap();
    let stream = ring.stream();
    assert!(worker.write(stream.tag(), &[1; 65]).is_none(), "bigger than a slot");
    let a = worker.write(stream.tag(), &[1; 64]).unwrap();
    let b = worker.write(stream.tag(), &[2; 10]).unwrap();
    assert_ne!(a, b);
    assert!(worker.write(stream.tag(), &[3; 10]).is_none(), "no slot is free");
    let lent = stream.take(b, 10).unwrap();
    assert_eq!(lent.as_ref(), &[2; 10]);
    drop(lent);
    assert!(
        worker.write(stream.tag(), &[4; 10]).is_some(),
        "the freed slot is used again"
    );
}

#[test]
fn slots_of_another_stream_out_of_range_or_overlong_are_refused() {
    let ring = Ring::create(3, 100).unwrap();
    let worker = Attached::open(ring.path(), &ring.nonce()).unwrap();
    let mine = ring.stream();
    let other = ring.stream();
    let slot = worker.write(other.tag(), &[9; 100]).unwrap();
    let err = mine.take(slot, 100).unwrap_err().to_string();
    assert!(
        err.contains(&format!("slot {slot}")) && err.contains("not written by this stream"),
        "{err}"
    );
    let err = other.take(7, 100).unwrap_err().to_string();
    assert!(err.contains("slot 7") && err.contains("out of range"), "{err}");
    let err = other.take(slot, 129).unwrap_err().to_string();
    assert!(err.contains("129 bytes named"), "{err}");
    // Still the other stream's to take.
    assert_eq!(other.take(slot, 100).unwrap().as_ref(), &[9; 100]);
}

#[test]
fn a_stream_that_ends_frees_what_it_wrote_and_never_named() {
    let ring = Ring::create(4, 16).unwrap();
    let worker = Attached::open(ring.path(), &ring.nonce()).unwrap();
    let stream = ring.stream();
    let kept = worker.write(stream.tag(), &[1; 16]).unwrap();
    let lent = stream.take(kept, 16).unwrap();
    worker.write(stream.tag(), &[2; 16]).unwrap();
    worker.write(stream.tag(), &[3; 16]).unwrap();
    let live = ring.stream();
    worker.write(live.tag(), &[4; 16]).unwrap();
    assert_eq!(ring.free_slots(), 0);
    drop(stream);
    // The two unnamed slots are free; the taken one and the live stream's are not.
    assert_eq!(ring.free_slots(), 2);
    assert_eq!(lent.as_ref(), &[1; 16]);
    drop(lent);
    assert_eq!(ring.free_slots(), 3);
}

#[test]
fn a_worker_maps_nothing_but_the_ring_it_was_meant_to() {
    let ring = Ring::create(2, 64).unwrap();
    let wrong = Attached::open(ring.path(), &[0; 16]).unwrap_err().to_string();
    assert!(wrong.contains(ring.path()) && wrong.contains("nonce"), "{wrong}");
    let short = Attached::open(ring.path(), &[0; 3]).unwrap_err().to_string();
    assert!(short.contains("nonce"), "{short}");
    // A plain file, even one holding a copy of the ring's header, is not
    // a sealed memfd; and only /proc/<pid>/fd paths are opened at all.
    let dir = std::env::temp_dir().join(format!("stoker-shm-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file_path = dir.join("ring");
    let mut file = std::fs::File::create(&file_path).unwrap();
    file.write_all(&ring.layout().header(&ring.nonce())).unwrap();
    file.set_len(ring.layout().total as u64).unwrap();
    let err = Attached::open(file_path.to_str().unwrap(), &ring.nonce())
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a /proc/<pid>/fd/<n> path"), "{err}");
    let via_proc = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file));
    let err = Attached::open(&via_proc, &ring.nonce()).unwrap_err().to_string();
    assert!(
        err.contains("not a /proc/<pid>/fd/<n> path"),
        "self is not a pid: {err}"
    );
    let via_pid = format!(
        "/proc/{}/fd/{}",
        std::process::id(),
        std::os::fd::AsRawFd::as_raw_fd(&file)
    );
    let err = Attached::open(&via_pid, &ring.nonce()).unwrap_err().to_string();
    assert!(err.contains("not a memfd sealed against resizing"), "{err}");
    let gone = Attached::open("/proc/1/fd/987654", &ring.nonce())
        .unwrap_err()
        .to_string();
    assert!(
        gone.contains("/proc/1/fd/987654") && gone.contains("open failed"),
        "{gone}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn layouts_are_bounded_and_headers_checked() {
    assert!(Layout::new(0, 10).is_err());
    assert!(Layout::new(layout::MAX_SLOTS + 1, 10).is_err());
    assert!(Layout::new(10, 0).is_err());
    let err = Layout::new(layout::MAX_SLOTS, layout::MAX_SLOT_BYTES)
        .unwrap_err()
        .to_string();
    assert!(err.contains("bytes in all"), "{err}");
    let l = Layout::new(3, 100).unwrap();
    assert_eq!((l.slot_bytes, l.data_offset, l.total), (128, 4096, 4096 + 384));
    let nonce = [5u8; 16];
    let h = l.header(&nonce);
    assert_eq!(Layout::parse(&h, l.total).unwrap(), (l, nonce));
    assert!(Layout::parse(&h, l.total - 1).unwrap_err().contains("the file holds"));
    let mut bad = h;
    bad[12] = 0xff;
    assert!(Layout::parse(&bad, l.total).is_err());
    let mut bad = h;
    bad[0] = b'X';
    assert!(
        Layout::parse(&bad, l.total)
            .unwrap_err()
            .contains("no stoker ring header")
    );
}

#[test]
fn this_host_has_an_identity() {
    let id = host_identity();
    assert!(id.contains("pid:["), "{id}");
    assert_eq!(id, host_identity());
}
