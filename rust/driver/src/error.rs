//! The driver layer's one error type.

use std::fmt;

use crate::sys::CUresult;

/// Everything the driver layer can fail with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No usable CUDA: the driver library or one of its symbols is missing, or
    /// the driver reports no device. Importing still works; using CUDA does not.
    Unavailable(String),
    /// A driver call returned an error.
    Driver {
        code: CUresult,
        name: String,
        message: String,
        /// What was being attempted, e.g. "launching a kernel".
        during: String,
    },
    /// A request the driver layer refuses before calling CUDA (bad size, name).
    Invalid(String),
    /// A device ordinal out of range (`count` devices exist).
    NoSuchDevice { ordinal: i64, count: usize },
    /// A child forked after its parent initialised CUDA: the driver's state does not survive
    /// `fork`, and calls into it there fail, hang or crash.
    Forked,
}

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unavailable(why) => write!(f, "CUDA is unavailable: {why}"),
            Error::Driver {
                name,
                message,
                during,
                ..
            } => write!(f, "{name} while {during}: {message}"),
            Error::Invalid(why) => f.write_str(why),
            Error::Forked => f.write_str(
                "CUDA initialized before forking: CUDA cannot be used in a child forked after \
                 its parent initialised it; start worker processes with the 'spawn' method \
                 (multiprocessing.get_context('spawn'))",
            ),
            Error::NoSuchDevice { ordinal, count } => write!(
                f,
                "device {ordinal} does not exist: there are {count} CUDA devices"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Names of the `CUresult` codes used when the driver itself cannot be asked
/// (it failed to load) and for tests; the driver's own names win otherwise.
pub fn fallback_error_name(code: CUresult) -> &'static str {
    match code {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        200 => "CUDA_ERROR_INVALID_IMAGE",
        201 => "CUDA_ERROR_INVALID_CONTEXT",
        209 => "CUDA_ERROR_NO_BINARY_FOR_GPU",
        218 => "CUDA_ERROR_INVALID_PTX",
        400 => "CUDA_ERROR_INVALID_HANDLE",
        500 => "CUDA_ERROR_NOT_FOUND",
        600 => "CUDA_ERROR_NOT_READY",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        701 => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        702 => "CUDA_ERROR_LAUNCH_TIMEOUT",
        710 => "CUDA_ERROR_ASSERT",
        714 => "CUDA_ERROR_HARDWARE_STACK_ERROR",
        715 => "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        716 => "CUDA_ERROR_MISALIGNED_ADDRESS",
        717 => "CUDA_ERROR_INVALID_ADDRESS_SPACE",
        718 => "CUDA_ERROR_INVALID_PC",
        719 => "CUDA_ERROR_LAUNCH_FAILED",
        720 => "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
        _ => "CUDA_ERROR_UNKNOWN",
    }
}

/// Errors after which the context is corrupt: the driver returns them from every later call
/// (a kernel faulted: illegal address or instruction, misaligned access, trap, assert, ...).
pub fn is_sticky(code: CUresult) -> bool {
    matches!(code, 700 | 710 | 714..=719)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_error_names_code_and_action() {
        let e = Error::Driver {
            code: 700,
            name: fallback_error_name(700).into(),
            message: "an illegal memory access was encountered".into(),
            during: "synchronizing the context".into(),
        };
        assert_eq!(
            e.to_string(),
            "CUDA_ERROR_ILLEGAL_ADDRESS while synchronizing the context: \
             an illegal memory access was encountered"
        );
    }

    #[test]
    fn faults_are_sticky_and_configuration_errors_are_not() {
        assert!(is_sticky(700) && is_sticky(719) && is_sticky(716));
        assert!(!is_sticky(1) && !is_sticky(701) && !is_sticky(720) && !is_sticky(2));
    }

    #[test]
    fn unknown_codes_have_a_name() {
        assert_eq!(fallback_error_name(12345), "CUDA_ERROR_UNKNOWN");
        assert_eq!(fallback_error_name(3), "CUDA_ERROR_NOT_INITIALIZED");
    }
}
