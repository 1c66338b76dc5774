//! [`KernelError`]: why a kernel could not be compiled, loaded or
//! launched, for every module of the crate.

/// Why a kernel could not be compiled, loaded or launched.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("nvrtc could not compile kernel module {module} for sm_{major}{minor}: {reason}")]
    Compile {
        module: &'static str,
        major: i32,
        minor: i32,
        reason: String,
    },
    #[error("cuda could not load kernel module {module}: {reason}")]
    Load { module: &'static str, reason: String },
    #[error("kernel module {module} has no function {function}: {reason}")]
    Function {
        module: &'static str,
        function: &'static str,
        reason: String,
    },
    #[error("cannot read the compute capability of cuda device {ordinal}: {reason}")]
    Device { ordinal: usize, reason: String },
    #[error("kernel {function}: {reason}")]
    Launch { function: &'static str, reason: String },
}

/// A [`KernelError::Launch`] of `function`.
pub(crate) fn launch_err(function: &'static str, reason: impl ToString) -> KernelError {
    KernelError::Launch {
        function,
        reason: reason.to_string(),
    }
}
