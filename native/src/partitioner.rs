//! Kafka's default key partitioner (Java murmur2, `toPositive(murmur2(key)) % n`) over a
//! list of keys, and the changelog offsets of a batch's records: the sink partitions and
//! numbers every change it publishes, so these run once per change.

use std::collections::HashMap;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::pyobj::bytes_of;

/// `org.apache.kafka.common.utils.Utils.murmur2`, as an unsigned 32-bit value.
pub(crate) fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    let length = data.len();
    let mut h = SEED ^ (length as u32);
    let blocks = data.chunks_exact(4);
    let tail = blocks.remainder();
    for block in blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    // Java's switch (length % 4) falls through from case 3 to case 1.
    if tail.len() == 3 {
        h ^= (tail[2] as u32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as u32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The partition of each key of `keys` (a list of `bytes`) among `num_partitions`, or None
/// when an item is not exactly `bytes` (the Python partitioner then decides, or names it).
#[pyfunction]
pub(crate) fn partitions_for_keys<'py>(
    py: Python<'py>,
    keys: &Bound<'py, PyList>,
    num_partitions: u32,
) -> PyResult<Option<Bound<'py, PyList>>> {
    if num_partitions == 0 {
        return Err(pyo3::exceptions::PyValueError::new_err("num_partitions must be >= 1"));
    }
    let ptr = keys.as_ptr();
    let len = unsafe { ffi::PyList_GET_SIZE(ptr) };
    let mut out = Vec::with_capacity(len as usize);
    for i in 0..len {
        let Some(key) = (unsafe { bytes_of(ffi::PyList_GET_ITEM(ptr, i)) }) else {
            return Ok(None);
        };
        out.push((murmur2(key) & 0x7fff_ffff) % num_partitions);
    }
    Ok(Some(PyList::new(py, out)?))
}

/// The offset of each record of a batch written in order to `partitions[i]`, numbering each
/// partition's records from `next[partition]` on; returns the offsets and the next offset
/// of each partition after them. A partition missing from `next` is an error (KeyError).
#[pyfunction]
pub(crate) fn consecutive_offsets(
    partitions: Vec<i32>,
    mut next: HashMap<i32, i64>,
) -> PyResult<(Vec<i64>, HashMap<i32, i64>)> {
    let mut out = Vec::with_capacity(partitions.len());
    for partition in partitions {
        let Some(slot) = next.get_mut(&partition) else {
            return Err(pyo3::exceptions::PyKeyError::new_err(partition));
        };
        out.push(*slot);
        *slot += 1;
    }
    Ok((out, next))
}
