//! Stored records decoded into Arrow columns: `(data key, envelope)` pairs become key, value,
//! partition, offset and timestamp columns (-1, "unknown", becomes null), the layout of
//! `spark_statestore.store.layout` (a negative field, "unknown", becomes null). Rows whose
//! envelope keeps headers (version 1) are handed back with their envelope for Python's
//! decoder; a malformed envelope stops the batch and is handed back with its key, for the
//! same decoder to name what is wrong.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::arrow::{as_bytes_i32, as_bytes_i64, BinaryBuilder};

pub const HEADER_SIZE: usize = 21;

/// The fields of one stored envelope (negative: unknown), its value bytes, and whether it
/// keeps headers (version 1: Python decodes those).
pub struct Envelope<'a> {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub value: &'a [u8],
    pub has_headers: bool,
}

impl<'a> Envelope<'a> {
    /// The envelope's fields, or None when it is malformed (too short, an unknown version,
    /// a headers length that does not fit): Python's decoder names what is wrong then.
    pub fn parse(envelope: &'a [u8]) -> Option<Self> {
        if envelope.len() < HEADER_SIZE {
            return None;
        }
        let (value, has_headers) = match envelope[0] {
            0 => (&envelope[HEADER_SIZE..], false),
            1 => {
                let length = i32::from_be_bytes(envelope.get(HEADER_SIZE..HEADER_SIZE + 4)?.try_into().ok()?);
                let end = (HEADER_SIZE + 4).checked_add(usize::try_from(length).ok()?)?;
                (envelope.get(end..)?, true)
            }
            _ => return None,
        };
        Some(Envelope {
            partition: i32::from_be_bytes(envelope[1..5].try_into().unwrap()),
            offset: i64::from_be_bytes(envelope[5..13].try_into().unwrap()),
            timestamp: i64::from_be_bytes(envelope[13..21].try_into().unwrap()),
            value,
            has_headers,
        })
    }
}

/// The value bytes of `envelope` when Python's decoder (`layout.decode_record`) accepts it
/// whole, headers included (each header: an int32 key length and a UTF-8 key, an int32 value
/// length, -1 for null, and the value bytes, all inside the headers block); None otherwise.
pub fn checked_value(envelope: &[u8]) -> Option<&[u8]> {
    let fields = Envelope::parse(envelope)?;
    if !fields.has_headers {
        return Some(fields.value);
    }
    let block = &envelope[HEADER_SIZE + 4..envelope.len() - fields.value.len()];
    let length = |at: usize| -> Option<i32> {
        Some(i32::from_be_bytes(block.get(at..at.checked_add(4)?)?.try_into().ok()?))
    };
    let mut at = 0usize;
    while at < block.len() {
        let size = usize::try_from(length(at)?).ok()?;
        let key = block.get(at + 4..)?.get(..size)?;
        std::str::from_utf8(key).ok()?;
        at += 4 + size;
        let size = match length(at)? {
            -1 => 0,
            s => usize::try_from(s).ok()?,
        };
        if block.len() - (at + 4) < size {
            return None;
        }
        at += 4 + size;
    }
    Some(fields.value)
}

/// A validity bitmap being built.
#[derive(Default)]
pub struct Validity {
    bits: Vec<u8>,
    len: usize,
    nulls: usize,
}

impl Validity {
    pub fn push(&mut self, valid: bool) {
        if self.len / 8 >= self.bits.len() {
            self.bits.push(0);
        }
        if valid {
            self.bits[self.len / 8] |= 1 << (self.len % 8);
        } else {
            self.nulls += 1;
        }
        self.len += 1;
    }

    pub fn into_py<'py>(self, py: Python<'py>) -> Bound<'py, PyAny> {
        if self.nulls == 0 {
            py.None().into_bound(py)
        } else {
            PyBytes::new(py, &self.bits).into_any()
        }
    }
}

#[derive(Default)]
pub struct Decoded {
    pub rows: usize,
    pub keys: BinaryBuilder,
    pub values: BinaryBuilder,
    partitions: Vec<i32>,
    partition_valid: Validity,
    offsets: Vec<i64>,
    offset_valid: Validity,
    timestamps: Vec<i64>,
    timestamp_valid: Validity,
    header_rows: Vec<(usize, Vec<u8>)>,
    pub bad: Option<(Vec<u8>, Vec<u8>)>,
    pub bytes: usize,
}

impl Decoded {
    pub fn new(rows: usize) -> Self {
        Decoded {
            keys: BinaryBuilder::with_capacity(rows, rows * 16),
            values: BinaryBuilder::with_capacity(rows, rows * 32),
            ..Default::default()
        }
    }

    /// Decodes `envelope` as the next row (key `key`); false (and `bad` set) when it is
    /// malformed, or when its partition is not `wanted` (nothing added then).
    pub fn push(&mut self, key: &[u8], envelope: &[u8], wanted: Option<&[i32]>) -> bool {
        let Some(fields) = Envelope::parse(envelope) else {
            self.bad = Some((key.to_vec(), envelope.to_vec()));
            return false;
        };
        let Envelope { partition, offset, timestamp, value, has_headers } = fields;
        if let Some(wanted) = wanted {
            if !wanted.contains(&partition) {
                return true;
            }
        }
        if !self.keys.fits(key.len()) || !self.values.fits(value.len()) {
            return false;
        }
        self.keys.push(key);
        self.values.push(value);
        self.partitions.push(partition);
        self.partition_valid.push(partition >= 0);
        self.offsets.push(offset);
        self.offset_valid.push(offset >= 0);
        self.timestamps.push(timestamp);
        self.timestamp_valid.push(timestamp >= 0);
        if has_headers {
            self.header_rows.push((self.rows, envelope.to_vec()));
        }
        self.rows += 1;
        self.bytes += key.len() + value.len();
        true
    }

    /// A missing key of a multi-get: a null value, null fields.
    pub fn push_missing(&mut self, key: &[u8]) {
        self.keys.push(key);
        self.values.push_null();
        self.partitions.push(0);
        self.partition_valid.push(false);
        self.offsets.push(0);
        self.offset_valid.push(false);
        self.timestamps.push(0);
        self.timestamp_valid.push(false);
        self.rows += 1;
    }

    /// `(rows, keys, values, (partition validity, partitions), (offset validity, offsets),
    /// (timestamp validity, timestamps), [(row, envelope)] of the rows with headers, bad
    /// (key, envelope) or None)`.
    pub fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let header_rows = PyList::empty(py);
        for (row, block) in &self.header_rows {
            header_rows.append((*row, PyBytes::new(py, block)))?;
        }
        let bad = match &self.bad {
            Some((key, envelope)) => (PyBytes::new(py, key), PyBytes::new(py, envelope)).into_pyobject(py)?.into_any(),
            None => py.None().into_bound(py),
        };
        let partitions = PyTuple::new(
            py,
            [self.partition_valid.into_py(py), PyBytes::new(py, as_bytes_i32(&self.partitions)).into_any()],
        )?;
        let offsets = PyTuple::new(
            py,
            [self.offset_valid.into_py(py), PyBytes::new(py, as_bytes_i64(&self.offsets)).into_any()],
        )?;
        let timestamps = PyTuple::new(
            py,
            [self.timestamp_valid.into_py(py), PyBytes::new(py, as_bytes_i64(&self.timestamps)).into_any()],
        )?;
        PyTuple::new(
            py,
            [
                self.rows.into_pyobject(py)?.into_any(),
                self.keys.into_py(py)?.into_any(),
                self.values.into_py(py)?.into_any(),
                partitions.into_any(),
                offsets.into_any(),
                timestamps.into_any(),
                header_rows.into_any(),
                bad,
            ],
        )
    }
}
