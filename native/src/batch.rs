//! Write batches: plyvel's `WriteBatch` interface, and whole columns of changelog records put
//! in one call (the store's key namespace and value envelope built here, not per record in
//! Python).

use std::ptr;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::arrow::{check_columns, Column};
use crate::db::{as_bytes, Inner};
use crate::errors::leveldb_error;
use crate::leveldb as ffi;
use crate::pyobj::{bytes_of, int_of};

fn varint_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 128 {
        n >>= 7;
        len += 1;
    }
    len
}

/// The writes of a batch, kept here until `write` hands them to LevelDB in key order, and
/// the size of their representation (what `WriteBatch::ApproximateSize` reports: 12 header
/// bytes, then per put a tag byte and varint-prefixed key and value, per delete a tag byte
/// and varint-prefixed key).
///
/// Key order: LevelDB applies a batch's writes one after the other into its memtable (a skip
/// list) and later writes that memtable to a table; writes in key order cost less (a
/// 100k-record sink commit of random keys: the write 48 ms before, 33 ms in key order plus
/// ~16 ms to sort; the log replay or flush that follows 80 ms before, 50 ms after). The order
/// is stable, so the writes of one key keep theirs: the batch ends in the same state.
pub struct RawBatch {
    /// Keys and values, one after the other.
    data: Vec<u8>,
    ops: Vec<Op>,
    size: usize,
    count: usize,
}

/// One write: its key at `data[start..start + key]`, then its value of `value` bytes (a put)
/// or none (a delete).
#[derive(Clone, Copy)]
struct Op {
    start: usize,
    key: usize,
    value: Option<usize>,
}

impl RawBatch {
    pub fn new() -> Self {
        RawBatch { data: Vec::new(), ops: Vec::new(), size: 12, count: 0 }
    }

    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        let start = self.data.len();
        self.data.extend_from_slice(key);
        self.data.extend_from_slice(value);
        self.ops.push(Op { start, key: key.len(), value: Some(value.len()) });
    }

    pub fn delete(&mut self, key: &[u8]) {
        let start = self.data.len();
        self.data.extend_from_slice(key);
        self.ops.push(Op { start, key: key.len(), value: None });
    }

    fn key_of(&self, op: &Op) -> &[u8] {
        &self.data[op.start..op.start + op.key]
    }

    fn account_put(&mut self, key: usize, value: usize) {
        self.size += 1 + varint_len(key) + key + varint_len(value) + value;
        self.count += 1;
    }

    fn account_delete(&mut self, key: usize) {
        self.size += 1 + varint_len(key) + key;
        self.count += 1;
    }

    fn clear(&mut self) {
        self.data.clear();
        self.ops.clear();
        self.size = 12;
        self.count = 0;
    }

    /// LevelDB's batch of these writes, in key order (stable: a key's writes keep their
    /// order). The caller destroys it.
    fn sorted_leveldb_batch(&self) -> *mut ffi::leveldb_writebatch_t {
        let mut order: Vec<(&[u8], usize)> = self.ops.iter().enumerate().map(|(i, op)| (self.key_of(op), i)).collect();
        if order.windows(2).any(|w| w[0].0 > w[1].0) {
            order.sort_unstable(); // ties broken by arrival: stable
        }
        unsafe {
            let batch = ffi::leveldb_writebatch_create();
            for (_, i) in order {
                let op = self.ops[i];
                let key = self.key_of(&op);
                match op.value {
                    Some(len) => {
                        let value = &self.data[op.start + op.key..op.start + op.key + len];
                        ffi::leveldb_writebatch_put(batch, key.as_ptr() as *const _, key.len(), value.as_ptr() as *const _, value.len())
                    }
                    None => ffi::leveldb_writebatch_delete(batch, key.as_ptr() as *const _, key.len()),
                }
            }
            batch
        }
    }
}

/// Reusable buffers for the records of one call, and where the envelopes given whole
/// (`heads`, in row order) are.
struct RecordWriter<'a> {
    prefix: &'a [u8],
    key: Vec<u8>,
    value: Vec<u8>,
    heads: std::iter::Peekable<std::slice::Iter<'a, (usize, Vec<u8>)>>,
}

impl<'a> RecordWriter<'a> {
    fn new(prefix: &'a [u8], heads: &'a [(usize, Vec<u8>)]) -> Self {
        RecordWriter { prefix, key: Vec::with_capacity(64), value: Vec::with_capacity(256), heads: heads.iter().peekable() }
    }

    /// Row `row`: `prefix + key` -> its envelope and `value`, or a delete when `value` is None.
    fn write(&mut self, batch: &mut RawBatch, row: usize, key: &[u8], value: Option<&[u8]>, fields: (i32, i64, i64)) {
        let head = match self.heads.peek() {
            Some((at, _)) if *at == row => self.heads.next().map(|(_, h)| h.as_slice()),
            _ => None,
        };
        self.key.clear();
        self.key.extend_from_slice(self.prefix);
        self.key.extend_from_slice(key);
        let Some(value) = value else {
            batch.delete(&self.key);
            batch.account_delete(self.key.len());
            return;
        };
        self.value.clear();
        if let Some(head) = head {
            self.value.extend_from_slice(head);
        } else {
            let (partition, offset, timestamp) = fields;
            self.value.push(0);
            self.value.extend_from_slice(&partition.to_be_bytes());
            self.value.extend_from_slice(&offset.to_be_bytes());
            self.value.extend_from_slice(&timestamp.to_be_bytes());
        }
        self.value.extend_from_slice(value);
        batch.put(&self.key, &self.value);
        batch.account_put(self.key.len(), self.value.len());
    }
}

/// Applies `batch` atomically (GIL released meanwhile).
pub fn write(py: Python<'_>, inner: &Arc<Inner>, batch: &RawBatch, sync: bool) -> PyResult<()> {
    let guard = inner.open(py)?;
    let db = guard.as_ref().expect("open").db as usize;
    let result = py.detach(|| unsafe {
        let raw = batch.sorted_leveldb_batch();
        let options = ffi::leveldb_writeoptions_create();
        ffi::leveldb_writeoptions_set_sync(options, sync as u8);
        let mut err = ptr::null_mut();
        ffi::leveldb_write(db as *mut _, options, raw, &mut err);
        ffi::leveldb_writeoptions_destroy(options);
        ffi::leveldb_writebatch_destroy(raw);
        ffi::take_error(err)
    });
    drop(guard);
    match result {
        Some(message) => Err(leveldb_error(&message)),
        None => Ok(()),
    }
}

/// A batch of writes applied atomically by `write()` (`plyvel.WriteBatch`'s interface).
#[pyclass(frozen, module = "spark_statestore_native")]
pub struct WriteBatch {
    inner: Arc<Inner>,
    batch: Mutex<RawBatch>,
    transaction: bool,
    sync: bool,
}

impl WriteBatch {
    pub(crate) fn new(inner: Arc<Inner>, transaction: bool, sync: bool) -> Self {
        WriteBatch { inner, batch: Mutex::new(RawBatch::new()), transaction, sync }
    }

    fn raw(&self) -> std::sync::MutexGuard<'_, RawBatch> {
        // A batch is one thread's (the store's transaction): it never waits here.
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl WriteBatch {
    fn put(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let (key, value) = (as_bytes(key, "key")?, as_bytes(value, "value")?);
        let mut batch = self.raw();
        batch.put(key, value);
        batch.account_put(key.len(), value.len());
        Ok(())
    }

    fn delete(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = as_bytes(key, "key")?;
        let mut batch = self.raw();
        batch.delete(key);
        batch.account_delete(key.len());
        Ok(())
    }

    fn clear(&self) {
        self.raw().clear();
    }

    fn write(&self, py: Python<'_>) -> PyResult<()> {
        let batch = self.raw();
        write(py, &self.inner, &batch, self.sync)
    }

    fn approximate_size(&self) -> usize {
        self.raw().size
    }

    /// Writes in this batch so far (puts and deletes).
    fn __len__(&self) -> usize {
        self.raw().count
    }

    /// Put changelog records given as Arrow columns: each non-null value becomes
    /// `prefix + key` -> a version 0 envelope (partition, offset, timestamp) + the value; a
    /// null value deletes `prefix + key`. A partition must be below `partitions`.
    ///
    /// `heads`: `(row, envelope start)` pairs in row order, for the rows whose envelope is
    /// not version 0 (a version 1 envelope keeping the record's headers): the given bytes
    /// replace the 21-byte header before the value.
    ///
    /// Raises ValueError(index, reason) for the first malformed record (nothing of the call
    /// is then in the batch), TypeError for columns of the wrong type or length.
    #[pyo3(signature = (keys, values, partitions, offsets, timestamps, *, prefix, max_partition, heads=None))]
    #[allow(clippy::too_many_arguments)]
    fn put_records(
        &self,
        keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        partitions: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
        timestamps: &Bound<'_, PyAny>,
        prefix: &[u8],
        max_partition: i64,
        heads: Option<Vec<(usize, Vec<u8>)>>,
    ) -> PyResult<usize> {
        let heads = heads.unwrap_or_default();
        if heads.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(PyValueError::new_err("heads must be in increasing row order"));
        }
        let keys = Column::borrow(keys, "keys")?;
        let values = Column::borrow(values, "values")?;
        let partitions = Column::borrow(partitions, "partitions")?;
        let offsets = Column::borrow(offsets, "offsets")?;
        let timestamps = Column::borrow(timestamps, "timestamps")?;
        let len = keys.len;
        check_columns(
            &[(&keys, "keys"), (&values, "values")],
            &[(&partitions, "partitions"), (&offsets, "offsets"), (&timestamps, "timestamps")],
            len,
        )?;
        // Check every record before touching the batch, so a bad one leaves it as it was.
        for i in 0..len {
            let bad = if keys.is_null(i) {
                Some("the key is null".to_string())
            } else {
                match (partitions.int(i), offsets.int(i), timestamps.int(i)) {
                    (None, _, _) => Some("the partition is null".to_string()),
                    (_, None, _) => Some("the offset is null".to_string()),
                    (_, _, None) => Some("the timestamp is null".to_string()),
                    (Some(p), _, _) if p >= max_partition || p < i32::MIN as i64 || p > i32::MAX as i64 => {
                        Some(format!("partition {p} out of range (the store has {max_partition})"))
                    }
                    _ => None,
                }
            };
            if let Some(reason) = bad {
                return Err(PyValueError::new_err((i, reason)));
            }
        }
        let mut batch = self.raw();
        let mut writer = RecordWriter::new(prefix, &heads);
        for i in 0..len {
            let value = if values.is_null(i) { None } else { Some(values.bytes(i)) };
            let fields = (
                partitions.int(i).unwrap() as i32,
                offsets.int(i).unwrap(),
                timestamps.int(i).unwrap(),
            );
            writer.write(&mut batch, i, keys.bytes(i), value, fields);
        }
        Ok(len)
    }

    /// `put_records` of Python sequences (the bulk path of `put_all`): keys `bytes`, values
    /// `bytes` or None, partitions, offsets and timestamps `int` (partition within
    /// `[-2**31, max_partition)`, the others int64). Returns False, with nothing put, when
    /// any field is of another type or out of range: the caller's reference path then
    /// handles (or names) it.
    #[pyo3(signature = (keys, values, partitions, offsets, timestamps, *, prefix, max_partition, heads=None))]
    #[allow(clippy::too_many_arguments)]
    fn put_rows<'py>(
        &self,
        keys: &Bound<'py, PyAny>,
        values: &Bound<'py, PyAny>,
        partitions: &Bound<'py, PyAny>,
        offsets: &Bound<'py, PyAny>,
        timestamps: &Bound<'py, PyAny>,
        prefix: &[u8],
        max_partition: i64,
        heads: Option<Vec<(usize, Vec<u8>)>>,
    ) -> PyResult<bool> {
        // Raw CPython calls: borrowed items of the sequences, exact-type checks, no
        // reference counting per field (this is the hot loop of put_all).
        use pyo3::ffi;
        let fast = |o: &Bound<'py, PyAny>| -> Option<Bound<'py, PyAny>> {
            let seq = unsafe { ffi::PySequence_Fast(o.as_ptr(), c"not a sequence".as_ptr()) };
            if seq.is_null() {
                unsafe { ffi::PyErr_Clear() };
                None
            } else {
                Some(unsafe { Bound::from_owned_ptr(o.py(), seq) })
            }
        };
        let (Some(keys), Some(values), Some(partitions), Some(offsets), Some(timestamps)) =
            (fast(keys), fast(values), fast(partitions), fast(offsets), fast(timestamps))
        else {
            return Ok(false);
        };
        // PySequence_Fast gives a list or a tuple: their item arrays, borrowed.
        let items = |s: &Bound<'py, PyAny>| -> Vec<*mut ffi::PyObject> {
            unsafe {
                let ptr = s.as_ptr();
                if ffi::PyList_Check(ptr) != 0 {
                    (0..ffi::PyList_GET_SIZE(ptr)).map(|i| ffi::PyList_GET_ITEM(ptr, i)).collect()
                } else {
                    (0..ffi::PyTuple_GET_SIZE(ptr)).map(|i| ffi::PyTuple_GET_ITEM(ptr, i)).collect()
                }
            }
        };
        let (k, v, p, o, t) = (items(&keys), items(&values), items(&partitions), items(&offsets), items(&timestamps));
        let len = k.len();
        if [v.len(), p.len(), o.len(), t.len()].iter().any(|&n| n != len) {
            return Ok(false);
        }
        let (k, v, p, o, t) = (k.as_ptr(), v.as_ptr(), p.as_ptr(), o.as_ptr(), t.as_ptr());
        let none = unsafe { ffi::Py_None() };
        let mut fields: Vec<(i32, i64, i64)> = Vec::with_capacity(len);
        for i in 0..len {
            unsafe {
                let (key, value) = (*k.add(i), *v.add(i));
                if bytes_of(key).is_none() || (value != none && bytes_of(value).is_none()) {
                    return Ok(false);
                }
                match (int_of(*p.add(i)), int_of(*o.add(i)), int_of(*t.add(i))) {
                    (Some(p), Some(o), Some(t))
                        if p < max_partition && p >= i32::MIN as i64 && p <= i32::MAX as i64 =>
                    {
                        fields.push((p as i32, o, t))
                    }
                    _ => return Ok(false),
                }
            }
        }
        let heads = heads.unwrap_or_default();
        let mut batch = self.raw();
        let mut writer = RecordWriter::new(prefix, &heads);
        for i in 0..len {
            unsafe {
                let value = *v.add(i);
                let value = if value == none { None } else { bytes_of(value) };
                writer.write(&mut batch, i, bytes_of(*k.add(i)).unwrap_or(&[]), value, fields[i]);
            }
        }
        Ok(true)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        if self.transaction && exc_type.is_some_and(|t| !t.is_none()) {
            return Ok(());
        }
        self.write(py)
    }
}

