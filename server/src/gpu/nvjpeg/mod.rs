//! nvJPEG, loaded at run time (`libnvjpeg.so.13`, then `.so.12`, then
//! `.so`), in three layers as cudarc does for the driver: [`sys`] (types
//! and the raw function table), [`result`] (every call checked, its error
//! naming the call and the status), [`safe`] (owners that free on drop).

pub(crate) mod result;
pub(crate) mod safe;
pub(crate) mod sys;

pub(crate) use result::NvjpegError;
pub use safe::Backend;
pub(crate) use safe::{Decoder, Handle, JpegStream};
