//! The batches the loader yields, and their upload: where a batch
//! assembled in host memory (`assemble`) meets its converted copy on the
//! GPU (`device`).
//!
//! The host side (the assembler and its buffers) is generic over a batch's
//! device part and never names the device module; this module fixes that
//! part to [`DeviceBatch`] and queues the upload. So the dependency runs
//! from here to both sides, and from the device side to the host side (the
//! pinned ring, `pinned`), never from the host side to the device.

use crate::assemble;
use crate::config::DeviceTarget;
use crate::device::{DeviceBatch, Uploader};
use crate::error::ClientError;
use crate::pinned::PinnedPool;

/// One batch: `len()` images of `height` x `width` x 3, uint8, NHWC, in
/// host memory; or, when the loader uploads to a GPU, in `device`.
pub type Batch = assemble::Batch<DeviceBatch>;

/// The uploader for `target` and its ring of pinned batch buffers: four
/// are enough, since a buffer returns as soon as its copy has completed
/// (one being filled, the others' copies in flight).
pub(crate) fn open_upload(target: DeviceTarget, batch_bytes: usize) -> Result<(Uploader, PinnedPool), String> {
    let up = Uploader::new(target.ordinal, target.spec).map_err(|e| e.to_string())?;
    let pool = up.pinned_pool(4, batch_bytes).map_err(|e| e.to_string())?;
    Ok((up, pool))
}

/// Queues a full batch's copy to the GPU and its conversion there, when
/// the loader uploads.
pub(crate) fn upload(uploader: Option<&Uploader>, mut batch: Batch) -> Result<Batch, ClientError> {
    let Some(up) = uploader else {
        return Ok(batch);
    };
    let Some(buf) = batch.pixels.take_pinned() else {
        return Ok(batch);
    };
    let on_device = std::mem::take(&mut batch.on_device);
    let device = up
        .upload(buf, batch.len(), batch.height, batch.width, &on_device)
        .map_err(|e| ClientError::Device(format!("batch {} of epoch {}: {e}", batch.index, batch.epoch)))?;
    batch.device = Some(device);
    Ok(batch)
}
