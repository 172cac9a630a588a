//! The exceptions LevelDB's errors become (the same kinds as plyvel's).

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyOSError, PyValueError};
use pyo3::PyErr;

create_exception!(spark_statestore_native, Error, PyException, "A LevelDB error.");
create_exception!(
    spark_statestore_native,
    CorruptionError,
    Error,
    "LevelDB found corrupted data."
);
create_exception!(
    spark_statestore_native,
    IOError,
    PyOSError,
    "LevelDB could not read or write a file (an OSError, as plyvel's IOError is)."
);

/// The exception for a LevelDB status message (`Status::ToString()`: "IO error: ...",
/// "Corruption: ...", ...).
pub fn leveldb_error(message: &str) -> PyErr {
    if message.starts_with("IO error") {
        IOError::new_err(message.to_string())
    } else if message.starts_with("Corruption") {
        CorruptionError::new_err(message.to_string())
    } else {
        Error::new_err(message.to_string())
    }
}

create_exception!(
    spark_statestore_native,
    EnvelopeError,
    PyValueError,
    "A stored value is not a valid envelope; args: (the envelope's bytes,), for the store's \
     Python decoder to name what is wrong."
);
