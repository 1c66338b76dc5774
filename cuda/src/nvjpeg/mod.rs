//! nvJPEG, loaded at run time (`libnvjpeg.so.13`, then `.so.12`, then
//! `.so`), in three layers as cudarc does for the driver: [`sys`] (types
//! and the raw function table), [`result`] (every call checked, its error
//! naming the call and the status), [`safe`] (owners that free on drop, and
//! decodes into [`crate::DeviceImage`]s checked against each JPEG's header).
//! Only the safe layer is public.

mod result;
mod safe;
mod sys;

pub use result::{ImageInfo, NvjpegError};
pub use safe::{Backend, Decoder, Handle, JpegStream, Library};
