//! A LevelDB database with the part of plyvel's interface the store uses (`DB`, `Snapshot`,
//! iterators, `WriteBatch`), plus the column operations that are the point of this crate.
//!
//! Locking: the database handle sits behind a read-write lock; every call holds it for
//! reading, `close()` for writing, so a close waits for calls in flight and every call after
//! it fails with "Database is closed" (a RuntimeError, as plyvel's). Iterators and
//! snapshots are registered with their database and destroyed by its close. Each has a lock
//! of its own, held by a call that reads through it (a multi-get holds its snapshot's while
//! it reads without the GIL), so a release from another thread waits for that call. A lock
//! is only ever waited for with the GIL released, and the GIL is never taken while a lock
//! is held by a thread that waited for it: a call that finds the lock free takes it at once
//! (a try-lock never blocks), otherwise it releases the GIL to wait.

use std::ffi::CString;
use std::ptr;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::errors::leveldb_error;
use crate::leveldb as ffi;
use crate::point;

pub(crate) struct Handle {
    pub(crate) db: *mut ffi::leveldb_t,
    options: *mut ffi::leveldb_options_t,
    cache: *mut ffi::leveldb_cache_t,
    policy: *mut ffi::leveldb_filterpolicy_t,
    pub(crate) read: *mut ffi::leveldb_readoptions_t,
}

// LevelDB's DB and options are thread-safe; every use is under `Inner`'s lock.
unsafe impl Send for Handle {}

/// Locks `mutex`, waiting without the GIL when another thread holds it (a thread holding it
/// may be waiting for the GIL).
pub(crate) fn lock_released<'a, T: Send>(py: Python<'_>, mutex: &'a Mutex<T>) -> std::sync::MutexGuard<'a, T> {
    match mutex.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            py.detach(|| SameThread(mutex.lock())).0.unwrap_or_else(|e| e.into_inner())
        }
    }
}

/// Carries a value out of `Python::detach`, whose closure runs on this same thread (the
/// bound is only a type-level check there).
pub(crate) struct SameThread<T>(pub(crate) T);
unsafe impl<T> Send for SameThread<T> {}
unsafe impl<T> Sync for SameThread<T> {}

impl<T> SameThread<T> {
    /// The value (a method, so that a closure captures the whole wrapper, not its field).
    pub(crate) fn get(self) -> T {
        self.0
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        unsafe {
            ffi::leveldb_close(self.db);
            ffi::leveldb_readoptions_destroy(self.read);
            ffi::leveldb_options_destroy(self.options);
            if !self.cache.is_null() {
                ffi::leveldb_cache_destroy(self.cache);
            }
            if !self.policy.is_null() {
                ffi::leveldb_filterpolicy_destroy(self.policy);
            }
        }
    }
}

/// Something a database's close must end first: an iterator or a snapshot.
pub(crate) trait Child: Send + Sync {
    /// Releases the LevelDB object (the database is still open, no call is in flight).
    fn end(&self, db: *mut ffi::leveldb_t);
    /// Iterators end before snapshots.
    fn order(&self) -> u8;
    /// True once ended.
    fn ended(&self) -> bool;
}

/// A child's `ended`, asked with the GIL held: a child whose lock a call holds (reading
/// through it without the GIL) is in use, so not ended; waiting for it here could deadlock.
fn ended<T>(mutex: &Mutex<T>, is_ended: impl FnOnce(&T) -> bool) -> bool {
    match mutex.try_lock() {
        Ok(ptrs) => is_ended(&ptrs),
        Err(std::sync::TryLockError::Poisoned(e)) => is_ended(&e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => false,
    }
}

pub(crate) struct Inner {
    pub(crate) path: String,
    handle: RwLock<Option<Handle>>,
    children: Mutex<Vec<Arc<dyn Child>>>,
}

// The raw pointers are LevelDB's thread-safe DB and options; every use is under the lock.
unsafe impl Send for Inner {}
unsafe impl Sync for Inner {}

pub(crate) type Guard<'a> = RwLockReadGuard<'a, Option<Handle>>;

impl Inner {
    /// The open handle, read-locked. Waits (without the GIL) only when a close holds or
    /// wants the lock.
    pub(crate) fn open<'a>(&'a self, py: Python<'_>) -> PyResult<Guard<'a>> {
        let guard = match self.handle.try_read() {
            Ok(guard) => guard,
            Err(_) => py.detach(|| SameThread(self.handle.read())).0.map_err(|_| poisoned())?,
        };
        if guard.is_none() {
            return Err(PyRuntimeError::new_err("Database is closed"));
        }
        Ok(guard)
    }

    /// Registers `child`, which the database's close ends if it has not ended by then.
    pub(crate) fn adopt(&self, child: Arc<dyn Child>) {
        let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
        if children.len() >= 64 {
            children.retain(|c| !c.ended());
        }
        children.push(child);
    }

    /// Ends `child` now, while the database is open (a child's Python object is gone):
    /// a close cannot run meanwhile, and one that ran before has ended it.
    pub(crate) fn end_child(&self, py: Python<'_>, child: &dyn Child) {
        let guard = match self.handle.try_read() {
            Ok(guard) => guard,
            Err(_) => py.detach(|| SameThread(self.handle.read())).0.unwrap_or_else(|e| e.into_inner()),
        };
        if let Some(handle) = guard.as_ref() {
            // Without the GIL: a call reading through the child (a multi-get) may hold it
            // while it reads without the GIL, and the end waits for that call.
            let db = SameThread(handle.db);
            py.detach(move || child.end(db.get()));
        }
    }

    fn close(&self, py: Python<'_>) {
        let mut guard = match self.handle.try_write() {
            Ok(guard) => guard,
            Err(_) => py.detach(|| SameThread(self.handle.write())).0.unwrap_or_else(|e| e.into_inner()),
        };
        if let Some(handle) = guard.as_ref() {
            let mut alive: Vec<Arc<dyn Child>> = {
                let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
                children.drain(..).collect()
            };
            alive.sort_by_key(|c| c.order());
            for child in alive {
                child.end(handle.db);
            }
        }
        *guard = None; // closes the database (Handle's Drop)
    }
}

fn poisoned() -> PyErr {
    PyRuntimeError::new_err("the database's lock is poisoned (a thread panicked in it)")
}

pub(crate) fn as_bytes<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a [u8]> {
    obj.cast::<PyBytes>()
        .map(|b| b.as_bytes())
        .map_err(|_| PyTypeError::new_err(format!("{what} must be bytes")))
}

/// A LevelDB database (`plyvel.DB`'s interface, the part the store uses).
#[pyclass(frozen, module = "spark_statestore_native")]
pub struct DB {
    pub(crate) inner: Arc<Inner>,
}

#[pymethods]
impl DB {
    #[new]
    #[pyo3(signature = (name, create_if_missing=false, *, error_if_exists=false, paranoid_checks=None,
        write_buffer_size=None, max_open_files=None, lru_cache_size=None, block_size=None,
        compression=Some("snappy".to_string()), bloom_filter_bits=0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: &str,
        create_if_missing: bool,
        error_if_exists: bool,
        paranoid_checks: Option<bool>,
        write_buffer_size: Option<usize>,
        max_open_files: Option<i32>,
        lru_cache_size: Option<usize>,
        block_size: Option<usize>,
        compression: Option<String>,
        bloom_filter_bits: i32,
    ) -> PyResult<Self> {
        let compression = match compression.as_deref() {
            None => ffi::NO_COMPRESSION,
            Some("snappy") => ffi::SNAPPY_COMPRESSION,
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "'compression' must be None or 'snappy', got {other:?}"
                )))
            }
        };
        let c_name = CString::new(name).map_err(|_| PyValueError::new_err("name contains NUL"))?;
        let handle = py.detach(|| unsafe {
            let options = ffi::leveldb_options_create();
            ffi::leveldb_options_set_create_if_missing(options, create_if_missing as u8);
            ffi::leveldb_options_set_error_if_exists(options, error_if_exists as u8);
            if let Some(v) = paranoid_checks {
                ffi::leveldb_options_set_paranoid_checks(options, v as u8);
            }
            if let Some(v) = write_buffer_size {
                ffi::leveldb_options_set_write_buffer_size(options, v);
            }
            if let Some(v) = max_open_files {
                ffi::leveldb_options_set_max_open_files(options, v);
            }
            if let Some(v) = block_size {
                ffi::leveldb_options_set_block_size(options, v);
            }
            ffi::leveldb_options_set_compression(options, compression);
            let cache = match lru_cache_size {
                Some(size) => ffi::leveldb_cache_create_lru(size),
                None => ptr::null_mut(),
            };
            if !cache.is_null() {
                ffi::leveldb_options_set_cache(options, cache);
            }
            let policy = if bloom_filter_bits > 0 {
                ffi::leveldb_filterpolicy_create_bloom(bloom_filter_bits)
            } else {
                ptr::null_mut()
            };
            if !policy.is_null() {
                ffi::leveldb_options_set_filter_policy(options, policy);
            }
            let mut err = ptr::null_mut();
            let db = ffi::leveldb_open(options, c_name.as_ptr(), &mut err);
            if let Some(message) = ffi::take_error(err) {
                ffi::leveldb_options_destroy(options);
                if !cache.is_null() {
                    ffi::leveldb_cache_destroy(cache);
                }
                if !policy.is_null() {
                    ffi::leveldb_filterpolicy_destroy(policy);
                }
                return Err(message);
            }
            let read = ffi::leveldb_readoptions_create();
            Ok(Handle { db, options, cache, policy, read })
        });
        let handle = handle.map_err(|message| leveldb_error(&message))?;
        Ok(DB {
            inner: Arc::new(Inner {
                path: name.to_string(),
                handle: RwLock::new(Some(handle)),
                children: Mutex::new(Vec::new()),
            }),
        })
    }

    #[getter]
    fn name(&self) -> &str {
        &self.inner.path
    }

    #[getter]
    fn closed(&self) -> bool {
        match self.inner.handle.try_read() {
            Ok(guard) => guard.is_none(),
            Err(_) => false, // a close in progress, or a call in flight
        }
    }

    /// Close the database; iterators and snapshots made from it end too. Idempotent.
    fn close(&self, py: Python<'_>) {
        self.inner.close(py);
    }

    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let stored = self.stored(py, as_bytes(key, "key")?)?;
        Ok(bytes_or(py, stored, default))
    }

    /// The value stored at `prefix + key`, its envelope decoded (None: absent; a malformed
    /// envelope raises `EnvelopeError(envelope)`); see `point.rs`.
    fn get_value<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>, prefix: &[u8]) -> PyResult<Option<Bound<'py, PyBytes>>> {
        point::value(py, key, prefix, |key| self.stored(py, key))
    }

    /// The record stored at `prefix + key`: None, `(value, partition, offset, timestamp)`,
    /// or the envelope's bytes when it keeps headers or is malformed; see `point.rs`.
    fn get_record<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>, prefix: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        point::record(py, key, prefix, |key| self.stored(py, key))
    }

    #[pyo3(signature = (key, value, *, sync=false))]
    fn put(&self, py: Python<'_>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>, sync: bool) -> PyResult<()> {
        let mut batch = crate::batch::RawBatch::new();
        batch.put(as_bytes(key, "key")?, as_bytes(value, "value")?);
        self.write_raw(py, &batch, sync)
    }

    #[pyo3(signature = (key, *, sync=false))]
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>, sync: bool) -> PyResult<()> {
        let mut batch = crate::batch::RawBatch::new();
        batch.delete(as_bytes(key, "key")?);
        self.write_raw(py, &batch, sync)
    }

    #[pyo3(signature = (*, transaction=false, sync=false))]
    fn write_batch(slf: &Bound<'_, Self>, transaction: bool, sync: bool) -> crate::batch::WriteBatch {
        crate::batch::WriteBatch::new(slf.get().inner.clone(), transaction, sync)
    }

    fn snapshot(&self, py: Python<'_>) -> PyResult<Snapshot> {
        let guard = self.inner.open(py)?;
        let db = guard.as_ref().expect("open").db;
        let snapshot = unsafe { ffi::leveldb_create_snapshot(db) };
        let state = Arc::new(SnapshotState {
            snapshot: Mutex::new(SnapshotPtrs { snapshot, read: unsafe { snapshot_read_options(snapshot) } }),
        });
        self.inner.adopt(state.clone());
        Ok(Snapshot { inner: self.inner.clone(), state })
    }

    /// An iterator (plyvel's keyword arguments: reverse, start, stop, include_start,
    /// include_stop, prefix, include_key, include_value, fill_cache).
    #[pyo3(signature = (**kwargs))]
    fn iterator(&self, py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Iterator> {
        let options = IteratorOptions::parse(kwargs)?;
        Iterator::open(py, &self.inner, None, options)
    }

    #[pyo3(signature = (start=None, stop=None))]
    fn compact_range(&self, py: Python<'_>, start: Option<Vec<u8>>, stop: Option<Vec<u8>>) -> PyResult<()> {
        let guard = self.inner.open(py)?;
        let db = guard.as_ref().expect("open").db as usize;
        py.detach(|| unsafe {
            let (sp, sl) = start.as_ref().map_or((ptr::null(), 0), |s| (s.as_ptr() as *const _, s.len()));
            let (tp, tl) = stop.as_ref().map_or((ptr::null(), 0), |s| (s.as_ptr() as *const _, s.len()));
            ffi::leveldb_compact_range(db as *mut _, sp, sl, tp, tl);
        });
        Ok(())
    }

    fn approximate_size(&self, py: Python<'_>, start: Vec<u8>, stop: Vec<u8>) -> PyResult<u64> {
        let guard = self.inner.open(py)?;
        let db = guard.as_ref().expect("open").db;
        let mut size = 0u64;
        unsafe {
            let starts = [start.as_ptr() as *const libc::c_char];
            let start_lens = [start.len()];
            let stops = [stop.as_ptr() as *const libc::c_char];
            let stop_lens = [stop.len()];
            ffi::leveldb_approximate_sizes(
                db,
                1,
                starts.as_ptr(),
                start_lens.as_ptr(),
                stops.as_ptr(),
                stop_lens.as_ptr(),
                &mut size,
            );
        }
        Ok(size)
    }

    fn get_property<'py>(&self, py: Python<'py>, name: Vec<u8>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let guard = self.inner.open(py)?;
        let db = guard.as_ref().expect("open").db;
        let c_name = CString::new(name).map_err(|_| PyValueError::new_err("name contains NUL"))?;
        unsafe {
            let value = ffi::leveldb_property_value(db, c_name.as_ptr());
            if value.is_null() {
                return Ok(None);
            }
            let bytes = PyBytes::new(py, std::ffi::CStr::from_ptr(value).to_bytes());
            ffi::leveldb_free(value as *mut libc::c_void);
            Ok(Some(bytes))
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, py: Python<'_>, _t: Py<PyAny>, _v: Py<PyAny>, _tb: Py<PyAny>) {
        self.inner.close(py);
    }
}

impl DB {
    /// The value at `key` (a copy, read with the database locked; the lock is released on return).
    fn stored(&self, py: Python<'_>, key: &[u8]) -> PyResult<Option<point::Stored>> {
        let guard = self.inner.open(py)?;
        let handle = guard.as_ref().expect("open");
        unsafe { point::stored_at(handle.db, handle.read, key) }
    }

    pub(crate) fn write_raw(&self, py: Python<'_>, batch: &crate::batch::RawBatch, sync: bool) -> PyResult<()> {
        crate::batch::write(py, &self.inner, batch, sync)
    }
}

/// A stored value as bytes, or `default` (None if not given) when absent (plyvel's `get`).
fn bytes_or<'py>(py: Python<'py>, stored: Option<point::Stored>, default: Option<Bound<'py, PyAny>>) -> Bound<'py, PyAny> {
    match stored {
        None => default.unwrap_or_else(|| py.None().into_bound(py)),
        Some(stored) => PyBytes::new(py, stored.bytes()).into_any(),
    }
}

unsafe fn snapshot_read_options(snapshot: *const ffi::leveldb_snapshot_t) -> *mut ffi::leveldb_readoptions_t {
    let read = ffi::leveldb_readoptions_create();
    ffi::leveldb_readoptions_set_snapshot(read, snapshot);
    read
}

pub(crate) struct SnapshotPtrs {
    pub(crate) snapshot: *const ffi::leveldb_snapshot_t, // null: released
    pub(crate) read: *mut ffi::leveldb_readoptions_t,
}

pub(crate) struct SnapshotState {
    pub(crate) snapshot: Mutex<SnapshotPtrs>,
}

unsafe impl Send for SnapshotPtrs {}
unsafe impl Send for SnapshotState {}
unsafe impl Sync for SnapshotState {}

impl Child for SnapshotState {
    fn end(&self, db: *mut ffi::leveldb_t) {
        let mut ptrs = self.snapshot.lock().unwrap_or_else(|e| e.into_inner());
        if !ptrs.snapshot.is_null() {
            unsafe {
                ffi::leveldb_release_snapshot(db, ptrs.snapshot);
                ffi::leveldb_readoptions_destroy(ptrs.read);
            }
            ptrs.snapshot = ptr::null();
            ptrs.read = ptr::null_mut();
        }
    }
    fn order(&self) -> u8 {
        1
    }
    fn ended(&self) -> bool {
        ended(&self.snapshot, |ptrs| ptrs.snapshot.is_null())
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        Python::attach(|py| self.inner.end_child(py, &*self.state));
    }
}

/// A consistent view of a database (`plyvel.Snapshot`'s interface, the part the store uses).
#[pyclass(frozen, module = "spark_statestore_native")]
pub struct Snapshot {
    pub(crate) inner: Arc<Inner>,
    pub(crate) state: Arc<SnapshotState>,
}

impl Snapshot {
    /// The database and this snapshot, both locked (the snapshot's lock waited for without
    /// the GIL), or the error a closed database or a released snapshot gives. Whoever holds
    /// them may read without the GIL: neither a close nor a release can run meanwhile.
    pub(crate) fn held<'a>(&'a self, py: Python<'_>) -> PyResult<(Guard<'a>, std::sync::MutexGuard<'a, SnapshotPtrs>)> {
        let guard = self.inner.open(py)?;
        let ptrs = lock_released(py, &self.state.snapshot);
        if ptrs.snapshot.is_null() {
            return Err(PyRuntimeError::new_err("Snapshot is closed"));
        }
        Ok((guard, ptrs))
    }

    /// The value at `key` in this snapshot (a copy, read with the database and the snapshot
    /// locked; both locks are released on return).
    fn stored(&self, py: Python<'_>, key: &[u8]) -> PyResult<Option<point::Stored>> {
        let (guard, ptrs) = self.held(py)?;
        unsafe { point::stored_at(guard.as_ref().expect("open").db, ptrs.read, key) }
    }
}

#[pymethods]
impl Snapshot {
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let stored = self.stored(py, as_bytes(key, "key")?)?;
        Ok(bytes_or(py, stored, default))
    }

    /// `DB.get_value` in this snapshot.
    fn get_value<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>, prefix: &[u8]) -> PyResult<Option<Bound<'py, PyBytes>>> {
        point::value(py, key, prefix, |key| self.stored(py, key))
    }

    /// `DB.get_record` in this snapshot.
    fn get_record<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>, prefix: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        point::record(py, key, prefix, |key| self.stored(py, key))
    }

    /// An iterator (plyvel's keyword arguments: reverse, start, stop, include_start,
    /// include_stop, prefix, include_key, include_value, fill_cache).
    #[pyo3(signature = (**kwargs))]
    fn iterator(&self, py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Iterator> {
        let options = IteratorOptions::parse(kwargs)?;
        Iterator::open(py, &self.inner, Some(&self.state), options)
    }

    /// One row per key of `keys` (an Arrow binary array), read at `prefix + key`: the decoded
    /// record, or a null value and null fields when the key is absent. Returns
    /// `envelopes.Decoded.into_py`'s tuple.
    fn get_records<'py>(&self, py: Python<'py>, keys: &Bound<'py, PyAny>, prefix: &[u8]) -> PyResult<Bound<'py, PyTuple>> {
        let keys = crate::arrow::Column::borrow(keys, "keys")?;
        if !keys.is_binary() {
            return Err(PyTypeError::new_err("keys must be a binary or string array"));
        }
        // Both locks stay held while the keys are read without the GIL.
        let (guard, ptrs) = self.held(py)?;
        let (db, read) = (guard.as_ref().expect("open").db, ptrs.read);
        let mut decoded = crate::envelopes::Decoded::new(keys.len);
        let error = {
            let decoded = SameThread(&mut decoded);
            let keys = SameThread(&keys);
            let (db, read) = (db as usize, read as usize);
            py.detach(move || unsafe {
                let (decoded, keys) = (decoded.get(), keys.get());
                let mut full = Vec::with_capacity(64);
                for i in 0..keys.len {
                    let key = keys.bytes(i);
                    full.clear();
                    full.extend_from_slice(prefix);
                    full.extend_from_slice(key);
                    let mut len = 0usize;
                    let mut err = ptr::null_mut();
                    let value = ffi::leveldb_get(db as *mut _, read as *const _, full.as_ptr() as *const _, full.len(), &mut len, &mut err);
                    if let Some(message) = ffi::take_error(err) {
                        return Some(message);
                    }
                    if value.is_null() {
                        decoded.push_missing(key);
                        continue;
                    }
                    let ok = decoded.push(key, std::slice::from_raw_parts(value as *const u8, len), None);
                    ffi::leveldb_free(value as *mut libc::c_void);
                    if !ok {
                        if decoded.bad.is_none() {
                            return Some("the answer does not fit one Arrow batch (2 GiB)".to_string());
                        }
                        return None;
                    }
                }
                None
            })
        };
        drop(ptrs);
        drop(guard);
        if let Some(message) = error {
            return Err(leveldb_error(&message));
        }
        decoded.into_py(py)
    }

    /// Release the snapshot (idempotent); plyvel's name for it.
    fn release(&self, py: Python<'_>) {
        self.inner.end_child(py, &*self.state);
    }

    fn close(&self, py: Python<'_>) {
        self.release(py);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, py: Python<'_>, _t: Py<PyAny>, _v: Py<PyAny>, _tb: Py<PyAny>) {
        self.release(py);
    }
}

/// An iterator's arguments, as plyvel's `DB.iterator` takes them (keywords only).
pub(crate) struct IteratorOptions {
    bounds: Bounds,
    include_key: bool,
    include_value: bool,
    fill_cache: bool,
}

impl IteratorOptions {
    fn parse(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let (mut reverse, mut include_start, mut include_stop) = (false, true, false);
        let (mut include_key, mut include_value, mut fill_cache) = (true, true, true);
        let (mut start, mut stop, mut prefix) = (None, None, None);
        if let Some(kwargs) = kwargs {
            for (name, value) in kwargs.iter() {
                let name: String = name.extract()?;
                let bytes = || -> PyResult<Option<Vec<u8>>> {
                    if value.is_none() { Ok(None) } else { Ok(Some(as_bytes(&value, &name)?.to_vec())) }
                };
                match name.as_str() {
                    "reverse" => reverse = value.is_truthy()?,
                    "include_start" => include_start = value.is_truthy()?,
                    "include_stop" => include_stop = value.is_truthy()?,
                    "include_key" => include_key = value.is_truthy()?,
                    "include_value" => include_value = value.is_truthy()?,
                    "fill_cache" => fill_cache = value.is_truthy()?,
                    "start" => start = bytes()?,
                    "stop" => stop = bytes()?,
                    "prefix" => prefix = bytes()?,
                    other => {
                        return Err(PyTypeError::new_err(format!("iterator() got an unexpected keyword argument {other:?}")))
                    }
                }
            }
        }
        let bounds = Bounds::new(start, stop, include_start, include_stop, prefix, reverse)?;
        Ok(IteratorOptions { bounds, include_key, include_value, fill_cache })
    }
}

/// Where an iterator starts and ends, as plyvel's arguments say.
#[derive(Clone)]
pub(crate) struct Bounds {
    pub(crate) start: Option<Vec<u8>>,
    pub(crate) stop: Option<Vec<u8>>,
    pub(crate) include_start: bool,
    pub(crate) include_stop: bool,
    pub(crate) reverse: bool,
}

impl Bounds {
    pub(crate) fn new(
        start: Option<Vec<u8>>,
        stop: Option<Vec<u8>>,
        include_start: bool,
        include_stop: bool,
        prefix: Option<Vec<u8>>,
        reverse: bool,
    ) -> PyResult<Self> {
        if let Some(prefix) = prefix {
            if start.is_some() || stop.is_some() {
                return Err(PyTypeError::new_err("'prefix' cannot be used together with 'start' or 'stop'"));
            }
            let stop = successor(&prefix);
            return Ok(Bounds { start: Some(prefix), stop, include_start: true, include_stop: false, reverse });
        }
        Ok(Bounds { start, stop, include_start, include_stop, reverse })
    }

    /// False once `key` is past the end this iterator walks towards.
    pub(crate) fn ahead(&self, key: &[u8]) -> bool {
        if self.reverse {
            match &self.start {
                None => true,
                Some(start) => key > start.as_slice() || (self.include_start && key == start.as_slice()),
            }
        } else {
            match &self.stop {
                None => true,
                Some(stop) => key < stop.as_slice() || (self.include_stop && key == stop.as_slice()),
            }
        }
    }

    /// Position `it` on the first key to yield (it may then be invalid or out of bounds).
    pub(crate) unsafe fn seek(&self, it: *mut ffi::leveldb_iterator_t) {
        if self.reverse {
            match &self.stop {
                None => ffi::leveldb_iter_seek_to_last(it),
                Some(stop) => {
                    ffi::leveldb_iter_seek(it, stop.as_ptr() as *const _, stop.len());
                    if ffi::leveldb_iter_valid(it) == 0 {
                        ffi::leveldb_iter_seek_to_last(it);
                    } else {
                        let key = iter_key(it);
                        if key > stop.as_slice() || (key == stop.as_slice() && !self.include_stop) {
                            ffi::leveldb_iter_prev(it);
                        }
                    }
                }
            }
        } else {
            match &self.start {
                None => ffi::leveldb_iter_seek_to_first(it),
                Some(start) => {
                    ffi::leveldb_iter_seek(it, start.as_ptr() as *const _, start.len());
                    if !self.include_start
                        && ffi::leveldb_iter_valid(it) != 0
                        && iter_key(it) == start.as_slice()
                    {
                        ffi::leveldb_iter_next(it);
                    }
                }
            }
        }
    }

    pub(crate) unsafe fn step(&self, it: *mut ffi::leveldb_iterator_t) {
        if self.reverse {
            ffi::leveldb_iter_prev(it)
        } else {
            ffi::leveldb_iter_next(it)
        }
    }
}

/// The first key after every key that starts with `prefix` (None: there is none).
pub(crate) fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut out = prefix.to_vec();
    while let Some(last) = out.pop() {
        if last != 0xff {
            out.push(last + 1);
            return Some(out);
        }
    }
    None
}

pub(crate) unsafe fn iter_key<'a>(it: *const ffi::leveldb_iterator_t) -> &'a [u8] {
    let mut len = 0usize;
    let key = ffi::leveldb_iter_key(it, &mut len);
    std::slice::from_raw_parts(key as *const u8, len)
}

pub(crate) unsafe fn iter_value<'a>(it: *const ffi::leveldb_iterator_t) -> &'a [u8] {
    let mut len = 0usize;
    let value = ffi::leveldb_iter_value(it, &mut len);
    std::slice::from_raw_parts(value as *const u8, len)
}

pub(crate) unsafe fn iter_error(it: *const ffi::leveldb_iterator_t) -> Option<String> {
    let mut err = ptr::null_mut();
    ffi::leveldb_iter_get_error(it, &mut err);
    ffi::take_error(err)
}

pub(crate) struct IterPtrs {
    // (pointers used only under the iterator's mutex)
    pub(crate) it: *mut ffi::leveldb_iterator_t, // null: ended
    read: *mut ffi::leveldb_readoptions_t,
    pub(crate) started: bool,
    pub(crate) done: bool,
    /// Where the next call resumes (a row that did not fit the last batch).
    pub(crate) resume: Option<Vec<u8>>,
}

pub(crate) struct IterState {
    pub(crate) ptrs: Mutex<IterPtrs>,
}

unsafe impl Send for IterState {}
unsafe impl Send for IterPtrs {}
unsafe impl Sync for IterState {}

impl Child for IterState {
    fn end(&self, _db: *mut ffi::leveldb_t) {
        let mut ptrs = self.ptrs.lock().unwrap_or_else(|e| e.into_inner());
        if !ptrs.it.is_null() {
            unsafe {
                ffi::leveldb_iter_destroy(ptrs.it);
                ffi::leveldb_readoptions_destroy(ptrs.read);
            }
            ptrs.it = ptr::null_mut();
            ptrs.read = ptr::null_mut();
        }
    }
    fn order(&self) -> u8 {
        0
    }
    fn ended(&self) -> bool {
        ended(&self.ptrs, |ptrs| ptrs.it.is_null())
    }
}

impl Drop for Iterator {
    fn drop(&mut self) {
        Python::attach(|py| self.inner.end_child(py, &*self.state));
    }
}

/// An iterator over a database or a snapshot (`plyvel`'s, forward use only).
#[pyclass(frozen, module = "spark_statestore_native")]
pub struct Iterator {
    pub(crate) inner: Arc<Inner>,
    pub(crate) state: Arc<IterState>,
    pub(crate) bounds: Bounds,
    include_key: bool,
    include_value: bool,
}

impl Iterator {
    pub(crate) fn open(
        py: Python<'_>,
        inner: &Arc<Inner>,
        snapshot: Option<&Arc<SnapshotState>>,
        options: IteratorOptions,
    ) -> PyResult<Self> {
        let IteratorOptions { bounds, include_key, include_value, fill_cache } = options;
        let guard = inner.open(py)?;
        let db = guard.as_ref().expect("open").db;
        let (it, read) = unsafe {
            let read = ffi::leveldb_readoptions_create();
            ffi::leveldb_readoptions_set_fill_cache(read, fill_cache as u8);
            if let Some(snapshot) = snapshot {
                let ptrs = lock_released(py, &snapshot.snapshot);
                if ptrs.snapshot.is_null() {
                    ffi::leveldb_readoptions_destroy(read);
                    return Err(PyRuntimeError::new_err("Snapshot is closed"));
                }
                ffi::leveldb_readoptions_set_snapshot(read, ptrs.snapshot);
            }
            (ffi::leveldb_create_iterator(db, read), read)
        };
        let state = Arc::new(IterState {
            ptrs: Mutex::new(IterPtrs { it, read, started: false, done: false, resume: None }),
        });
        inner.adopt(state.clone());
        drop(guard);
        Ok(Iterator { inner: inner.clone(), state, bounds, include_key, include_value })
    }

    /// Moves to the next key in bounds; false at the end. Call with the database read-locked
    /// and the iterator's pointers locked.
    pub(crate) unsafe fn advance(&self, ptrs: &mut IterPtrs) -> PyResult<bool> {
        self.advance_detached(ptrs).map_err(|message| leveldb_error(&message))
    }

    /// `advance` without Python (errors as LevelDB's message).
    pub(crate) unsafe fn advance_detached(&self, ptrs: &mut IterPtrs) -> Result<bool, String> {
        if ptrs.done {
            return Ok(false);
        }
        if ptrs.started {
            self.bounds.step(ptrs.it);
        } else if let Some(key) = ptrs.resume.take() {
            ffi::leveldb_iter_seek(ptrs.it, key.as_ptr() as *const _, key.len());
            if self.bounds.reverse {
                // Resuming a reverse walk: the seek lands at or after the key.
                if ffi::leveldb_iter_valid(ptrs.it) == 0 {
                    ffi::leveldb_iter_seek_to_last(ptrs.it);
                } else if iter_key(ptrs.it) > key.as_slice() {
                    ffi::leveldb_iter_prev(ptrs.it);
                }
            }
            ptrs.started = true;
        } else {
            self.bounds.seek(ptrs.it);
            ptrs.started = true;
        }
        if ffi::leveldb_iter_valid(ptrs.it) == 0 || !self.bounds.ahead(iter_key(ptrs.it)) {
            ptrs.done = true;
            if let Some(message) = iter_error(ptrs.it) {
                return Err(message);
            }
            return Ok(false);
        }
        Ok(true)
    }

    pub(crate) fn locked<'a>(&'a self, py: Python<'_>) -> PyResult<(Guard<'a>, std::sync::MutexGuard<'a, IterPtrs>)> {
        let guard = self.inner.open(py)?;
        let ptrs = lock_released(py, &self.state.ptrs);
        if ptrs.it.is_null() {
            return Err(PyRuntimeError::new_err("Iterator is closed"));
        }
        Ok((guard, ptrs))
    }
}

#[pymethods]
impl Iterator {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (_guard, mut ptrs) = self.locked(py)?;
        unsafe {
            if !self.advance(&mut ptrs)? {
                return Err(PyStopIteration::new_err(()));
            }
            let it = ptrs.it;
            match (self.include_key, self.include_value) {
                (true, true) => Ok(PyTuple::new(
                    py,
                    [PyBytes::new(py, iter_key(it)), PyBytes::new(py, iter_value(it))],
                )?
                .into_any()),
                (true, false) => Ok(PyBytes::new(py, iter_key(it)).into_any()),
                (false, true) => Ok(PyBytes::new(py, iter_value(it)).into_any()),
                (false, false) => Ok(py.None().into_bound(py)),
            }
        }
    }

    /// The next records, decoded into Arrow buffers: up to `max_rows` rows or about
    /// `max_bytes` of keys and values, each key without its first `strip` bytes, only rows
    /// of changelog partitions `partitions` (None: all). Returns `(decoded, examined, done)`,
    /// `decoded` as `envelopes.Decoded.into_py` describes it.
    #[pyo3(signature = (max_rows, max_bytes, strip, partitions=None))]
    fn next_records<'py>(
        &self,
        py: Python<'py>,
        max_rows: usize,
        max_bytes: usize,
        strip: usize,
        partitions: Option<Vec<i32>>,
    ) -> PyResult<(Bound<'py, PyTuple>, usize, bool)> {
        let (guard, mut ptrs) = self.locked(py)?;
        let mut decoded = crate::envelopes::Decoded::new(max_rows.min(65536));
        let mut examined = 0usize;
        let result = {
            let ptrs = SameThread(&mut *ptrs);
            let decoded = SameThread(&mut decoded);
            let examined = SameThread(&mut examined);
            py.detach(move || unsafe {
                let (ptrs, decoded, examined) = (ptrs.get(), decoded.get(), examined.get());
                // Rows another partition holds are read too: bound those per call.
                let max_examined = max_rows.max(1024).saturating_mul(8);
                while decoded.rows < max_rows && decoded.bytes < max_bytes && *examined < max_examined {
                    match self.advance_detached(ptrs) {
                        Err(message) => return Err(message),
                        Ok(false) => return Ok(true),
                        Ok(true) => {}
                    }
                    *examined += 1;
                    let key = iter_key(ptrs.it);
                    let stripped = if key.len() >= strip { &key[strip..] } else { key };
                    if !decoded.push(stripped, iter_value(ptrs.it), partitions.as_deref()) {
                        if decoded.bad.is_none() {
                            // An Arrow column is full: this row starts the next call.
                            ptrs.started = false;
                            ptrs.resume = Some(key.to_vec());
                            *examined -= 1;
                        }
                        return Ok(false);
                    }
                }
                Ok(false)
            })
        };
        drop(ptrs);
        drop(guard);
        let done = result.map_err(|message| leveldb_error(&message))?;
        Ok((decoded.into_py(py)?, examined, done))
    }

    fn close(&self, py: Python<'_>) {
        self.inner.end_child(py, &*self.state);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, py: Python<'_>, _t: Py<PyAny>, _v: Py<PyAny>, _tb: Py<PyAny>) {
        self.inner.end_child(py, &*self.state);
    }
}
