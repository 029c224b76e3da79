//! The extension's one error enum, and its one conversion to Python exceptions.
//! The exception classes are defined in Python, in `fastlaunch/errors.py`.

use fastlaunch_driver as driver;
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

#[derive(Debug)]
pub enum Error {
    /// From the driver layer: no CUDA, a failed driver call, or a refused request.
    Driver(driver::Error),
    /// A kernel argument that cannot be passed.
    Argument {
        position: usize,
        name: String,
        message: String,
    },
    /// A launch beyond a device or kernel limit (threads, shared memory, grid, registers,
    /// co-residency, clusters): `LaunchConfigurationError`, a `ValueError`.
    LaunchConfiguration(String),
    /// A launch the driver refused, explained by the limit it broke: `LaunchRefusedError`,
    /// both a `LaunchConfigurationError` and a `CudaDriverError` (what numba-cuda raises).
    LaunchRefused {
        explanation: String,
        code: driver::CUresult,
        name: String,
        during: String,
    },
    /// The wrong kind of object (launch configuration, stream, ...): `TypeError`.
    Type(String),
    /// A value out of range or malformed: `ValueError`.
    Value(String),
    /// An index out of range: `IndexError`.
    Index(String),
    /// An object that cannot be pickled: `pickle.PicklingError`.
    Pickling(String),
    /// An exception already raised by Python code we called.
    Python(PyErr),
}

pub(crate) type Result<T> = std::result::Result<T, Error>;

impl From<driver::Error> for Error {
    fn from(e: driver::Error) -> Error {
        Error::Driver(e)
    }
}

impl From<PyErr> for Error {
    fn from(e: PyErr) -> Error {
        Error::Python(e)
    }
}

static ERRORS_MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn python_exception<'py, A>(py: Python<'py>, class: &str, args: A) -> PyErr
where
    A: pyo3::call::PyCallArgs<'py>,
{
    let built = ERRORS_MODULE
        .get_or_try_init(py, || py.import("fastlaunch.errors").map(Bound::unbind))
        .and_then(|module| module.bind(py).getattr(class))
        .and_then(|class| class.call1(args));
    match built {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}

impl From<Error> for PyErr {
    #[cold]
    fn from(e: Error) -> PyErr {
        Python::attach(|py| match e {
            Error::Driver(driver::Error::Unavailable(why)) => python_exception(
                py,
                "CudaUnavailableError",
                (format!("CUDA is unavailable: {why}"),),
            ),
            Error::Driver(
                ref err @ driver::Error::Driver {
                    code,
                    ref name,
                    ref during,
                    ..
                },
            ) => python_exception(
                py,
                "CudaDriverError",
                (err.to_string(), code, name.clone(), during.clone()),
            ),
            Error::Driver(ref err @ driver::Error::Forked) => {
                python_exception(py, "CudaForkedError", (err.to_string(),))
            }
            Error::Driver(driver::Error::Invalid(why)) => PyValueError::new_err(why),
            Error::Driver(ref err @ driver::Error::NoSuchDevice { .. }) => {
                PyIndexError::new_err(err.to_string())
            }
            Error::Argument {
                position,
                name,
                message,
            } => python_exception(
                py,
                "KernelArgumentError",
                (
                    if name.is_empty() {
                        format!("argument {position}: {message}")
                    } else {
                        format!("argument {position} ({name}): {message}")
                    },
                    position,
                    name,
                ),
            ),
            Error::LaunchConfiguration(message) => {
                python_exception(py, "LaunchConfigurationError", (message,))
            }
            Error::LaunchRefused {
                explanation,
                code,
                name,
                during,
            } => python_exception(
                py,
                "LaunchRefusedError",
                (
                    format!("{explanation} ({name} from the driver)"),
                    code,
                    name,
                    during,
                ),
            ),
            Error::Type(message) => PyTypeError::new_err(message),
            Error::Value(message) => PyValueError::new_err(message),
            Error::Index(message) => PyIndexError::new_err(message),
            Error::Pickling(message) => py
                .import("pickle")
                .and_then(|pickle| pickle.getattr("PicklingError"))
                .and_then(|class| class.call1((message,)))
                .map_or_else(|e| e, PyErr::from_value),
            Error::Python(err) => err,
        })
    }
}
