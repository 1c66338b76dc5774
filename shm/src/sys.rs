//! The libc calls the ring needs, each as a `Result` naming the call, and
//! [`Mapping`], a shared mapping unmapped on drop.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::ShmError;

fn last_error(call: &'static str) -> ShmError {
    ShmError::Call {
        call,
        reason: std::io::Error::last_os_error().to_string(),
    }
}

/// A sealable, close-on-exec memfd of `len` bytes, sealed against
/// shrinking and growing: a peer that mapped it can never fault past its
/// end (SIGBUS) because the owner truncated it.
pub(crate) fn sealed_memfd(name: &str, len: usize) -> Result<OwnedFd, ShmError> {
    let name = CString::new(name).map_err(|_| ShmError::Call {
        call: "memfd_create",
        reason: "name holds a NUL byte".to_owned(),
    })?;
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(last_error("memfd_create"));
    }
    // SAFETY: `fd` was just returned by memfd_create and is owned by no one else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len_off = libc::off_t::try_from(len).map_err(|_| ShmError::Call {
        call: "ftruncate",
        reason: format!("{len} bytes is too large"),
    })?;
    // SAFETY: plain syscall on a descriptor we own.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len_off) } != 0 {
        return Err(last_error("ftruncate"));
    }
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: plain syscall on a descriptor we own.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(last_error("fcntl(F_ADD_SEALS)"));
    }
    Ok(fd)
}

/// Opens `path` read-write, close-on-exec.
pub(crate) fn open_rw(path: &str) -> Result<OwnedFd, ShmError> {
    let c_path = CString::new(path).map_err(|_| ShmError::Call {
        call: "open",
        reason: "path holds a NUL byte".to_owned(),
    })?;
    // SAFETY: `c_path` is NUL-terminated and outlives the call.
    let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(last_error("open"));
    }
    // SAFETY: `fd` was just returned by open and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The size of a regular file, or why `fd` is not one.
pub(crate) fn regular_file_len(fd: &OwnedFd) -> Result<u64, String> {
    // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer and `fd` is open.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(format!("fstat failed: {}", std::io::Error::last_os_error()));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err("not a regular file".to_owned());
    }
    u64::try_from(st.st_size).map_err(|_| "negative size".to_owned())
}

/// Whether `fd` is sealed so that it can neither shrink nor grow.
pub(crate) fn size_sealed(fd: &OwnedFd) -> bool {
    // SAFETY: plain syscall on an open descriptor; a non-memfd answers -1.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & libc::F_SEAL_SHRINK != 0 && seals & libc::F_SEAL_GROW != 0
}

/// 16 random bytes from the kernel.
pub(crate) fn random_nonce() -> Result<[u8; 16], ShmError> {
    let mut nonce = [0u8; 16];
    let mut filled = 0;
    while filled < nonce.len() {
        let rest = &mut nonce[filled..];
        // SAFETY: `rest` is a valid writable buffer of `rest.len()` bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(last_error("getrandom"));
        }
        filled += n as usize;
    }
    Ok(nonce)
}

/// A read-write shared mapping of a whole file, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; all access to
// it goes through raw pointers whose synchronisation the ring's protocol
// (atomic slot words) provides.
unsafe impl Send for Mapping {}
// SAFETY: as for Send: `&self` hands out only raw pointers.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `fd`, shared, read-write.
    pub(crate) fn shared(fd: &OwnedFd, len: usize) -> Result<Self, ShmError> {
        // SAFETY: a fresh shared mapping chosen by the kernel, of a
        // descriptor we hold open; nothing else aliases it in this process.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(last_error("mmap"));
        }
        Ok(Self { ptr: ptr.cast(), len })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned, unmapped once.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}
