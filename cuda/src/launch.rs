//! What every launch wrapper shares: the block size, the grids of a
//! one-thread-per-pixel launch and of a batch launch, and the check of an
//! image against its buffer.

use cudarc::driver::LaunchConfig;

use crate::KernelError;
use crate::error::launch_err;

/// Threads per block of every kernel: one thread per output pixel.
pub(crate) const THREADS: u32 = 256;

/// A launch of one thread per pixel of a `w` x `h` image.
pub(crate) fn per_pixel(w: u32, h: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((w * h).div_ceil(THREADS), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The rows of blocks of a launch over `len` images (`blockIdx.y` is the
/// image): at most 65,535, the grid's limit.
pub(crate) fn batch_rows(name: &'static str, len: usize) -> Result<u32, KernelError> {
    u32::try_from(len)
        .ok()
        .filter(|&n| n <= 65_535)
        .ok_or_else(|| launch_err(name, format!("batch of {len} images is over 65535")))
}

/// The grid of a batch launch: image `blockIdx.y`, each image's blocks
/// striding over its `most` (at most) work items.
pub(crate) fn batch_grid(name: &'static str, len: usize, most: u32) -> Result<LaunchConfig, KernelError> {
    Ok(LaunchConfig {
        grid_dim: (most.div_ceil(THREADS).clamp(1, 256), batch_rows(name, len)?, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// Checks a `w` x `h` image's size against a buffer of `len` elements of
/// `per_pixel` each.
pub(crate) fn check_image(
    function: &'static str,
    what: &str,
    w: u32,
    h: u32,
    len: usize,
    per_pixel: u64,
) -> Result<(), KernelError> {
    let pixels = u64::from(w) * u64::from(h);
    if pixels == 0 || pixels > u64::from(u32::MAX / 3) {
        return Err(KernelError::Launch {
            function,
            reason: format!("image size {w}x{h} is out of range"),
        });
    }
    if (len as u64) < pixels * per_pixel {
        return Err(KernelError::Launch {
            function,
            reason: format!("{what} of {len} elements is too small for {w}x{h}"),
        });
    }
    Ok(())
}
