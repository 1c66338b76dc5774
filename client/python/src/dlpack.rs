//! A batch on the GPU, handed to PyTorch (or any DLPack consumer) without
//! a copy: `torch.from_dlpack(tensor)` calls `__dlpack_device__` and
//! `__dlpack__(stream=...)`, which makes the consumer's stream wait for the
//! batch's copy and conversion and returns a `dltensor` capsule that owns
//! the batch. The batch's device memory is freed when the consumer calls
//! the capsule's deleter (torch: when the tensor is freed), ordered after
//! the work queued on the consumer's stream (see `DeviceBatch`'s drop).
//!
//! The DLPack structs below follow `dlpack.h` (the unversioned
//! `DLManagedTensor`, which every consumer accepts).

use std::ffi::{CStr, c_void};
use std::sync::Mutex;

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use stoker_client::device::{CUstream, DType, DeviceBatch, ForeignStream, Layout, keeping_current_context};

/// `kDLCUDA`.
const DL_CUDA: i32 = 2;
/// `kDLUInt`, `kDLFloat`, `kDLBfloat`.
const DL_UINT: u8 = 1;
const DL_FLOAT: u8 = 2;
const DL_BFLOAT: u8 = 4;

/// A consumer that takes the tensor over renames the capsule
/// (`used_dltensor`) and calls the deleter itself.
const CAPSULE_NAME: &CStr = c"dltensor";

#[repr(C)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    /// Null: compact row-major.
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// What a capsule owns: the DLPack header (first, so that a pointer to the
/// whole is a pointer to the header), the shape it points into, the batch.
#[repr(C)]
struct Managed {
    tensor: DLManagedTensor,
    shape: [i64; 4],
    batch: DeviceBatch,
}

/// DLPack's deleter: frees what `export` boxed.
///
/// # Safety
///
/// `tensor` must come from `export` and not have been deleted yet.
unsafe extern "C" fn delete_managed(tensor: *mut DLManagedTensor) {
    if tensor.is_null() {
        return;
    }
    // SAFETY: the caller passes a tensor `export` made, once; its
    // `manager_ctx` is the `Box<Managed>` leaked there.
    let ctx = unsafe { (*tensor).manager_ctx };
    // SAFETY: as above: the pointer came from `Box::into_raw` and is
    // reclaimed exactly once.
    let managed = unsafe { Box::from_raw(ctx.cast::<Managed>()) };
    keeping_current_context(|| drop(managed));
}

/// The capsule's destructor: deletes the tensor unless a consumer took it
/// (renamed the capsule) and became responsible for calling the deleter.
///
/// # Safety
///
/// Called by Python with a capsule this module made.
unsafe extern "C" fn capsule_destructor(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: `capsule` is a live capsule; asking for its name and pointer
    // under the name it was made with is always allowed.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, CAPSULE_NAME.as_ptr()) == 1 {
            let ptr = pyo3::ffi::PyCapsule_GetPointer(capsule, CAPSULE_NAME.as_ptr());
            delete_managed(ptr.cast::<DLManagedTensor>());
        }
    }
}

fn dl_dtype(dtype: DType) -> DLDataType {
    let (code, bits) = match dtype {
        DType::U8 => (DL_UINT, 8),
        DType::F32 => (DL_FLOAT, 32),
        DType::F16 => (DL_FLOAT, 16),
        DType::Bf16 => (DL_BFLOAT, 16),
    };
    DLDataType { code, bits, lanes: 1 }
}

/// A batch on the GPU, for `torch.from_dlpack`. Exported once.
#[pyclass(module = "stoker._stoker")]
pub struct DeviceTensor {
    batch: Mutex<Option<DeviceBatch>>,
    ordinal: usize,
    shape: [usize; 4],
}

impl DeviceTensor {
    pub fn new(batch: DeviceBatch) -> Self {
        Self {
            ordinal: batch.ordinal(),
            shape: batch.shape(),
            batch: Mutex::new(Some(batch)),
        }
    }
}

#[pymethods]
impl DeviceTensor {
    /// `(kDLCUDA, device ordinal)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (DL_CUDA, self.ordinal as i32)
    }

    /// `[B, 3, H, W]` or `[B, H, W, 3]`.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.shape.to_vec()
    }

    /// The DLPack capsule. `stream` is the consumer's CUDA stream handle
    /// (1 or none: the legacy default stream); the consumer's later work on
    /// that stream waits for the batch. With -1 (no synchronisation asked)
    /// or 2 (the per-thread default stream, which would be another stream
    /// on the thread that frees the batch) the batch is waited for on the
    /// host first. The stream must outlive the tensor (PyTorch's
    /// current stream does).
    #[pyo3(signature = (stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<isize>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        // The versioned protocol is optional: an unversioned capsule is
        // what a consumer must accept when it asked for a newer one.
        let _ = max_version;
        if let Some(d) = dl_device
            && d != (DL_CUDA, self.ordinal as i32)
        {
            return Err(PyBufferError::new_err(format!(
                "batch is on cuda device {}; exporting it to device {d:?} would need a copy",
                self.ordinal
            )));
        }
        if copy == Some(true) {
            return Err(PyBufferError::new_err("a stoker batch is exported without a copy"));
        }
        let batch = self
            .batch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| PyBufferError::new_err("this stoker batch was already exported"))?;
        let waited = match stream {
            // No stream: DLPack's default, the legacy default stream.
            // SAFETY: the null handle is the legacy default stream.
            None => keeping_current_context(|| batch.wait_on(&ForeignStream::legacy_default())),
            // No synchronisation asked, or the per-thread default stream
            // (another stream on the thread that frees the batch): wait on
            // the host, and order the free after the legacy stream at least.
            Some(-1) | Some(2) => py.detach(|| {
                keeping_current_context(|| {
                    batch.synchronize()?;
                    batch.wait_on(&ForeignStream::legacy_default())
                })
            }),
            Some(s) if s == 0 || s < -1 => {
                return Err(PyBufferError::new_err(format!(
                    "stream {s} is not a CUDA stream for DLPack (0 is ambiguous; use 1 for the default stream)"
                )));
            }
            Some(s) => {
                // 1 is CUDA's legacy default stream, which the null handle
                // also names; other values are stream handles.
                let handle = if s == 1 { 0 } else { s } as CUstream;
                // SAFETY: DLPack's contract: `stream` is a live stream of
                // the consumer on this device (its primary context, which
                // the batch shares), and PyTorch keeps its streams alive
                // for the process; null is the legacy default stream.
                let consumer = unsafe { ForeignStream::from_raw(handle) };
                keeping_current_context(|| batch.wait_on(&consumer))
            }
        };
        waited.map_err(|e| crate::err(format!("cannot hand the batch to the consumer's stream: {e}")))?;
        export(py, batch)
    }
}

/// Boxes `batch` with its DLPack header and wraps it in a capsule.
fn export(py: Python<'_>, batch: DeviceBatch) -> PyResult<Bound<'_, PyCapsule>> {
    let shape = batch.shape().map(|d| d as i64);
    let dtype = dl_dtype(batch.dtype());
    let data = batch.device_ptr() as *mut c_void;
    let ordinal = batch.ordinal() as i32;
    debug_assert!(matches!(batch.layout(), Layout::Nchw | Layout::Nhwc));
    let managed = Box::into_raw(Box::new(Managed {
        tensor: DLManagedTensor {
            dl_tensor: DLTensor {
                data,
                device: DLDevice {
                    device_type: DL_CUDA,
                    device_id: ordinal,
                },
                ndim: 4,
                dtype,
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_managed),
        },
        shape,
        batch,
    }));
    // SAFETY: `managed` was just leaked from a Box and is not shared yet;
    // the header's pointers are set to its own (heap, so stable) fields.
    unsafe {
        (*managed).tensor.dl_tensor.shape = (*managed).shape.as_mut_ptr();
        (*managed).tensor.manager_ctx = managed.cast::<c_void>();
    }
    // SAFETY: the pointer is valid until the deleter runs; the destructor
    // runs the deleter only while the capsule still has its original name,
    // that is, when no consumer took the tensor over.
    let capsule = unsafe {
        pyo3::ffi::PyCapsule_New(
            managed.cast::<c_void>(),
            CAPSULE_NAME.as_ptr(),
            Some(capsule_destructor),
        )
    };
    if capsule.is_null() {
        // SAFETY: no capsule owns the tensor: free it here, once.
        unsafe { delete_managed(managed.cast::<DLManagedTensor>()) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `capsule` is a new, owned reference to a capsule object.
    let any = unsafe { Bound::from_owned_ptr(py, capsule) };
    Ok(any.downcast_into::<PyCapsule>()?)
}
