//! nvJPEG, loaded at run time (`libnvjpeg.so.13`, then `.so.12`, then
//! `.so`), in three layers as cudarc does for the driver: [`sys`] (types
//! and the raw function table), [`result`] (every call checked, its error
//! naming the call and the status), [`safe`] (owners that free on drop).

pub mod result;
pub mod safe;
pub mod sys;

pub use result::NvjpegError;
pub use safe::{Backend, Decoder, Handle, JpegStream};
