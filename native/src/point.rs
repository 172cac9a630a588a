//! Point reads: one key's stored envelope read and decoded in one call (`DB.get_value`,
//! `Snapshot.get_value`, `get_record`), the store's `get` without a Python step between the
//! key namespace, LevelDB and the envelope.
//!
//! The value LevelDB copies out is held as [`Stored`] while the database's (and snapshot's)
//! locks are released, and only then turned into Python objects: building those may run
//! Python code (a garbage collection, a finalizer that closes a snapshot), which must not
//! find this call's locks held.

use std::ptr;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::envelopes::{checked_value, Envelope};
use crate::errors::{leveldb_error, EnvelopeError};
use crate::leveldb as ffi;

/// A value LevelDB returned (its copy, freed on drop).
pub(crate) struct Stored {
    ptr: *mut libc::c_char,
    len: usize,
}

impl Stored {
    pub(crate) fn bytes(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Stored {
    fn drop(&mut self) {
        unsafe { ffi::leveldb_free(self.ptr as *mut libc::c_void) }
    }
}

/// The value at `key` read with `read` (None: absent). Call with the database (and the
/// snapshot `read` names) locked.
pub(crate) unsafe fn stored_at(
    db: *mut ffi::leveldb_t,
    read: *const ffi::leveldb_readoptions_t,
    key: &[u8],
) -> PyResult<Option<Stored>> {
    let mut len = 0usize;
    let mut err = ptr::null_mut();
    let value = ffi::leveldb_get(db, read, key.as_ptr() as *const _, key.len(), &mut len, &mut err);
    if let Some(message) = ffi::take_error(err) {
        return Err(leveldb_error(&message));
    }
    Ok((!value.is_null()).then_some(Stored { ptr: value, len }))
}

/// `prefix + key` as Python computes it: bytes joined here, anything else (a bytearray, a
/// memoryview, a str) through Python's own `+`, which joins it or raises its TypeError.
fn prefixed_key(prefix: &[u8], key: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = key.cast::<PyBytes>() {
        let mut full = Vec::with_capacity(prefix.len() + bytes.as_bytes().len());
        full.extend_from_slice(prefix);
        full.extend_from_slice(bytes.as_bytes());
        return Ok(full);
    }
    let joined = PyBytes::new(key.py(), prefix).add(key)?;
    Ok(crate::db::as_bytes(&joined, "key")?.to_vec())
}

/// `get_value` of a database or a snapshot, whose `stored` reads one key with its locks held.
pub(crate) fn value<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    prefix: &[u8],
    stored: impl FnOnce(&[u8]) -> PyResult<Option<Stored>>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    value_of(py, stored(&prefixed_key(prefix, key)?)?)
}

/// `get_record` of a database or a snapshot, whose `stored` reads one key with its locks held.
pub(crate) fn record<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    prefix: &[u8],
    stored: impl FnOnce(&[u8]) -> PyResult<Option<Stored>>,
) -> PyResult<Bound<'py, PyAny>> {
    record_of(py, stored(&prefixed_key(prefix, key)?)?)
}

/// The value bytes of a stored envelope, None when absent; a malformed envelope (anything
/// `layout.decode_record` refuses) raises `EnvelopeError(envelope)` for that decoder to name
/// what is wrong.
fn value_of(py: Python<'_>, stored: Option<Stored>) -> PyResult<Option<Bound<'_, PyBytes>>> {
    let Some(stored) = stored else { return Ok(None) };
    match checked_value(stored.bytes()) {
        Some(value) => Ok(Some(PyBytes::new(py, value))),
        None => Err(EnvelopeError::new_err((PyBytes::new(py, stored.bytes()).unbind(),))),
    }
}

/// A stored envelope as a record: None when absent, `(value, partition, offset, timestamp)`
/// for an envelope without headers (None for an unknown field), else the envelope's bytes
/// (one with headers, or a malformed one) for `layout.decode_record` to decode or refuse.
fn record_of(py: Python<'_>, stored: Option<Stored>) -> PyResult<Bound<'_, PyAny>> {
    let Some(stored) = stored else { return Ok(py.None().into_bound(py)) };
    match Envelope::parse(stored.bytes()) {
        Some(fields) if !fields.has_headers => {
            let known = |v: i64| if v >= 0 { Some(v) } else { None };
            Ok(PyTuple::new(
                py,
                [
                    PyBytes::new(py, fields.value).into_any(),
                    known(fields.partition.into()).into_pyobject(py)?,
                    known(fields.offset).into_pyobject(py)?,
                    known(fields.timestamp).into_pyobject(py)?,
                ],
            )?
            .into_any())
        }
        _ => Ok(PyBytes::new(py, stored.bytes()).into_any()),
    }
}
