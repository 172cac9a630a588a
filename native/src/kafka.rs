//! A read_committed Kafka reader (librdkafka, the library confluent-kafka wraps) that hands
//! out what it consumed as Arrow columns: no Python object per record. Position headers are
//! merged here on the common path (a `v` = 0 header and a `c` header that decodes); every
//! other header case is handed back with its row index for the Python rules to decide, so
//! errors, skips and unknown versions behave exactly as on the pure-Python path.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use rdkafka_sys as rd;

use crate::arrow::{as_bytes_i32, as_bytes_i64, BinaryBuilder};
use crate::positions::{decode_entries, Merged};

struct Client {
    rk: *mut rd::rd_kafka_t,
    queue: *mut rd::rd_kafka_queue_t,
}

unsafe impl Send for Client {}

impl Drop for Client {
    fn drop(&mut self) {
        unsafe {
            rd::rd_kafka_queue_destroy(self.queue);
            rd::rd_kafka_consumer_close(self.rk);
            rd::rd_kafka_destroy(self.rk);
        }
    }
}

fn error_name(code: rd::rd_kafka_resp_err_t) -> (String, String) {
    unsafe {
        (
            CStr::from_ptr(rd::rd_kafka_err2name(code)).to_string_lossy().into_owned(),
            CStr::from_ptr(rd::rd_kafka_err2str(code)).to_string_lossy().into_owned(),
        )
    }
}

/// Why librdkafka's client was not made from the settings.
pub(crate) enum ClientError {
    /// A name or value contains NUL.
    Nul(String),
    /// librdkafka refused a setting (or the client), in its words.
    Refused(String),
}

impl ClientError {
    pub(crate) fn message(&self) -> String {
        match self {
            ClientError::Nul(name) => format!("setting {name:?} contains NUL"),
            ClientError::Refused(text) => text.clone(),
        }
    }
}

/// A librdkafka client of `kind` with `settings` (librdkafka properties as strings);
/// `prepare` sets what only code can (callbacks) before the client is made.
pub(crate) unsafe fn new_client(
    kind: rd::rd_kafka_type_t,
    settings: &[(String, String)],
    prepare: impl FnOnce(*mut rd::rd_kafka_conf_t),
) -> Result<*mut rd::rd_kafka_t, ClientError> {
    let conf = rd::rd_kafka_conf_new();
    let mut errstr = [0 as c_char; 512];
    for (name, value) in settings {
        let (Ok(c_name), Ok(c_value)) = (CString::new(name.as_str()), CString::new(value.as_str())) else {
            rd::rd_kafka_conf_destroy(conf);
            return Err(ClientError::Nul(name.clone()));
        };
        let result = rd::rd_kafka_conf_set(conf, c_name.as_ptr(), c_value.as_ptr(), errstr.as_mut_ptr(), errstr.len());
        if result != rd::rd_kafka_conf_res_t::RD_KAFKA_CONF_OK {
            rd::rd_kafka_conf_destroy(conf);
            return Err(ClientError::Refused(CStr::from_ptr(errstr.as_ptr()).to_string_lossy().into_owned()));
        }
    }
    prepare(conf);
    let rk = rd::rd_kafka_new(kind, conf, errstr.as_mut_ptr(), errstr.len());
    if rk.is_null() {
        rd::rd_kafka_conf_destroy(conf);
        return Err(ClientError::Refused(CStr::from_ptr(errstr.as_ptr()).to_string_lossy().into_owned()));
    }
    Ok(rk)
}

/// A consumer assigned to partitions of one topic, read in column batches.
#[pyclass(frozen, module = "spark_statestore_native")]
pub struct ColumnReader {
    client: Mutex<Option<Client>>,
    topic: CString,
    /// The assigned partitions, and per partition the offset of its last partition-end
    /// event while no record at or past it has come (see `positions`).
    assigned: Mutex<(Vec<i32>, HashMap<i32, i64>)>,
}

#[pymethods]
impl ColumnReader {
    /// `settings`: librdkafka properties as strings (confluent-kafka's configuration, without
    /// Python callbacks).
    #[new]
    fn new(settings: Vec<(String, String)>, topic: &str) -> PyResult<Self> {
        let topic = CString::new(topic).map_err(|_| PyValueError::new_err("topic contains NUL"))?;
        unsafe {
            let rk = new_client(rd::rd_kafka_type_t::RD_KAFKA_CONSUMER, &settings, |_| {})
                .map_err(|e| PyValueError::new_err(e.message()))?;
            rd::rd_kafka_poll_set_consumer(rk);
            let queue = rd::rd_kafka_queue_get_consumer(rk);
            Ok(ColumnReader {
                client: Mutex::new(Some(Client { rk, queue })),
                topic,
                assigned: Mutex::new((Vec::new(), HashMap::new())),
            })
        }
    }

    /// Read `starts[i] = (partition, offset)` from now on (replaces the assignment).
    fn assign(&self, py: Python<'_>, starts: Vec<(i32, i64)>) -> PyResult<()> {
        let guard = crate::db::lock_released(py, &self.client);
        let client = guard.as_ref().ok_or_else(closed)?;
        let rk = client.rk as usize;
        let topic = self.topic.as_ptr() as usize;
        let err = py.detach(|| unsafe {
            let list = rd::rd_kafka_topic_partition_list_new(starts.len() as i32);
            for (partition, offset) in &starts {
                let tp = rd::rd_kafka_topic_partition_list_add(list, topic as *const c_char, *partition);
                (*tp).offset = *offset;
            }
            let err = rd::rd_kafka_assign(rk as *mut _, list);
            rd::rd_kafka_topic_partition_list_destroy(list);
            err
        });
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            let (name, text) = error_name(err);
            return Err(PyRuntimeError::new_err(format!("assign failed: {name}: {text}")));
        }
        let mut assigned = self.assigned.lock().unwrap_or_else(|e| e.into_inner());
        *assigned = (starts.iter().map(|(p, _)| *p).collect(), HashMap::new());
        Ok(())
    }

    /// Up to `max_records` records, waiting at most `timeout_ms`: for a whole chunk
    /// (`fill`; an event, such as a partition's end, ends that wait), else for the first
    /// arrival and whatever came with it. Returns a tuple:
    /// `(rows, keys, values, partitions, offsets, timestamps, events, merged, without, slow,
    /// kept)`: Arrow buffers of the records (keys and values as `(validity, offsets, data)`;
    /// the int32/int64 columns as little-endian bytes); events `(code, name, partition,
    /// offset, text)` (partition EOF, offset reset, errors); the merged position of the rows
    /// on the common header path `{topic: {partition: offset}}` (events: code 0 named
    /// `NULL_KEY` is a record without a key, which is not in the columns); how many rows had no `v`
    /// header; `[(row, headers)]` of the rows whose position headers need the full rules;
    /// `[(row, headers)]` of the rows with headers besides `v`/`c` (those others only);
    /// `[(partition, next offset)]`: the consumer's position in each assigned partition,
    /// past the records returned and the transaction markers after them.
    ///
    /// With `feed`, two more elements: each row's timestamp type (int32 bytes) and each
    /// row's own position as the buffers of an Arrow `map<string, map<int32, int64>>`
    /// (`(row validity or None, row offsets, topics (offsets, data), topic offsets,
    /// partitions, offsets)`; null for the rows without a position on the common path).
    #[pyo3(signature = (max_records, timeout_ms, fill, feed=false))]
    fn poll<'py>(&self, py: Python<'py>, max_records: usize, timeout_ms: i32, fill: bool, feed: bool) -> PyResult<Bound<'py, PyTuple>> {
        let guard = crate::db::lock_released(py, &self.client);
        let client = guard.as_ref().ok_or_else(closed)?;
        let (rk, queue) = (client.rk as usize, client.queue as usize);
        let max_records = max_records.clamp(1, 1_000_000);
        let batch = py.detach(|| unsafe { read_batch(rk as *mut _, queue as *mut _, max_records, timeout_ms, fill, feed) });
        let mut batch = batch;
        batch.next = unsafe { self.positions(rk as *mut _, &batch) };
        let rows = batch.rows;
        let events = PyList::empty(py);
        for (code, partition, offset) in batch.events.drain(..) {
            let (name, text) = if code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                ("NULL_KEY".to_string(), "a record without a key".to_string())
            } else {
                error_name(code)
            };
            events.append((code as i32, name, partition, offset, text))?;
        }
        let merged = PyDict::new(py);
        for (topic, partitions) in batch.merged.offsets.iter() {
            let inner = PyDict::new(py);
            for (p, o) in partitions {
                inner.set_item(*p, *o)?;
            }
            merged.set_item(String::from_utf8_lossy(topic), inner)?;
        }
        let slow = headers_list(py, &batch.slow)?;
        let kept = headers_list(py, &batch.kept)?;
        let keys = std::mem::take(&mut batch.keys).into_py(py)?;
        let values = std::mem::take(&mut batch.values).into_py(py)?;
        let partitions = PyBytes::new(py, as_bytes_i32(&batch.partitions));
        let offsets = PyBytes::new(py, as_bytes_i64(&batch.offsets));
        let timestamps = PyBytes::new(py, as_bytes_i64(&batch.timestamps));
        let mut items: Vec<Bound<'py, PyAny>> = Vec::new();
        if let Some(rowpos) = batch.row_positions.take() {
            items.push(PyBytes::new(py, as_bytes_i32(&batch.timestamp_types)).into_any());
            items.push(rowpos.into_py(py)?.into_any());
        }
        let tuple = PyTuple::new(
            py,
            [
                rows.into_pyobject(py)?.into_any(),
                keys.into_any(),
                values.into_any(),
                partitions.into_any(),
                offsets.into_any(),
                timestamps.into_any(),
                events.into_any(),
                merged.into_any(),
                batch.merged.without.into_pyobject(py)?.into_any(),
                slow.into_any(),
                kept.into_any(),
                batch.next.into_pyobject(py)?.into_any(),
            ],
        )?;
        if items.is_empty() {
            return Ok(tuple);
        }
        let mut all: Vec<Bound<'py, PyAny>> = tuple.iter().collect();
        all.extend(items);
        PyTuple::new(py, all)
    }

    /// Close the consumer (idempotent).
    fn close(&self, py: Python<'_>) {
        let client = crate::db::lock_released(py, &self.client).take();
        if let Some(client) = client {
            let client = SendClient(client);
            py.detach(move || drop(client));
        }
    }
}

/// Moves a client into `Python::detach` to be dropped there (librdkafka's close can wait
/// for the broker).
impl ColumnReader {
    /// The consumer's positions after `batch`. In librdkafka 2.12's batch path a partition
    /// end event moves `rd_kafka_position` one past the end (confluent-kafka's 2.16 does
    /// not): a position exactly one past the last partition end, with no record at or past
    /// that end since, is that end.
    unsafe fn positions(&self, rk: *mut rd::rd_kafka_t, batch: &Batch) -> Vec<(i32, i64)> {
        let mut guard = self.assigned.lock().unwrap_or_else(|e| e.into_inner());
        let (assigned, ends) = &mut *guard;
        for (code, partition, offset) in &batch.events {
            if *code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__PARTITION_EOF {
                ends.insert(*partition, *offset);
            }
        }
        for (partition, next) in &batch.next {
            if ends.get(partition).is_some_and(|end| next - 1 >= *end) {
                ends.remove(partition);
            }
        }
        if assigned.is_empty() {
            return Vec::new();
        }
        let list = rd::rd_kafka_topic_partition_list_new(assigned.len() as i32);
        for partition in assigned.iter() {
            rd::rd_kafka_topic_partition_list_add(list, self.topic.as_ptr(), *partition);
        }
        rd::rd_kafka_position(rk, list);
        let mut out = Vec::with_capacity(assigned.len());
        for i in 0..(*list).cnt as usize {
            let tp = (*list).elems.add(i);
            let (partition, mut offset) = ((*tp).partition, (*tp).offset);
            if offset < 0 {
                continue; // no position yet
            }
            if let Some(end) = ends.get(&partition) {
                if offset == end + 1 {
                    offset = *end;
                }
            }
            out.push((partition, offset));
        }
        rd::rd_kafka_topic_partition_list_destroy(list);
        // Past every record returned, whatever the consumer says.
        for (partition, next) in &batch.next {
            match out.iter_mut().find(|(p, _)| p == partition) {
                Some(slot) => slot.1 = slot.1.max(*next),
                None => out.push((*partition, *next)),
            }
        }
        out
    }
}

struct SendClient(#[allow(dead_code)] Client);

fn closed() -> PyErr {
    PyRuntimeError::new_err("the Kafka reader is closed")
}

type Headers = Vec<(String, Option<Vec<u8>>)>;

fn headers_list<'py>(py: Python<'py>, rows: &[(usize, Headers)]) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for (row, headers) in rows {
        let items = PyList::empty(py);
        for (name, value) in headers {
            let value = match value {
                Some(v) => PyBytes::new(py, v).into_any(),
                None => py.None().into_bound(py),
            };
            items.append((name.as_str(), value))?;
        }
        out.append((*row, items))?;
    }
    Ok(out)
}

#[derive(Default)]
struct Batch {
    rows: usize,
    keys: BinaryBuilder,
    values: BinaryBuilder,
    partitions: Vec<i32>,
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    events: Vec<(rd::rd_kafka_resp_err_t, i32, i64)>,
    merged: Merged,
    slow: Vec<(usize, Headers)>,
    kept: Vec<(usize, Headers)>,
    next: Vec<(i32, i64)>,
    timestamp_types: Vec<i32>,
    row_positions: Option<RowPositions>,
}

/// Each row's own position, as the buffers of an Arrow `map<string, map<int32, int64>>`.
#[derive(Default)]
struct RowPositions {
    valid: crate::envelopes::Validity,
    row_offsets: Vec<i32>,
    topics: BinaryBuilder,
    topic_offsets: Vec<i32>,
    partitions: Vec<i32>,
    offsets: Vec<i64>,
}

impl RowPositions {
    fn new() -> Self {
        RowPositions {
            row_offsets: vec![0],
            topics: BinaryBuilder::with_capacity(0, 0),
            topic_offsets: vec![0],
            ..Default::default()
        }
    }

    /// The next row: its sorted, unique entries (None: a null position).
    fn push(&mut self, entries: Option<&[(&[u8], i32, i64)]>) {
        match entries {
            None => self.valid.push(false),
            Some(entries) => {
                self.valid.push(true);
                let mut last: Option<&[u8]> = None;
                for &(topic, partition, offset) in entries {
                    if last != Some(topic) {
                        if last.is_some() {
                            self.topic_offsets.push(self.partitions.len() as i32);
                        }
                        self.topics.push(topic);
                        last = Some(topic);
                    }
                    self.partitions.push(partition);
                    self.offsets.push(offset);
                }
                if last.is_some() {
                    self.topic_offsets.push(self.partitions.len() as i32);
                }
            }
        }
        self.row_offsets.push(self.topics.len as i32);
    }

    fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let valid = self.valid.into_py(py);
        let topics = self.topics.into_py(py)?;
        PyTuple::new(
            py,
            [
                valid,
                PyBytes::new(py, as_bytes_i32(&self.row_offsets)).into_any(),
                PyTuple::new(py, [topics.get_item(1)?, topics.get_item(2)?])?.into_any(),
                PyBytes::new(py, as_bytes_i32(&self.topic_offsets)).into_any(),
                PyBytes::new(py, as_bytes_i32(&self.partitions)).into_any(),
                PyBytes::new(py, as_bytes_i64(&self.offsets)).into_any(),
            ],
        )
    }
}

const CHUNK: usize = 8192;

unsafe fn read_batch(
    rk: *mut rd::rd_kafka_t,
    queue: *mut rd::rd_kafka_queue_t,
    max_records: usize,
    timeout_ms: i32,
    fill: bool,
    feed: bool,
) -> Batch {
    let mut batch = Batch {
        keys: BinaryBuilder::with_capacity(max_records.min(65536), 0),
        values: BinaryBuilder::with_capacity(max_records.min(65536), 0),
        row_positions: if feed { Some(RowPositions::new()) } else { None },
        ..Default::default()
    };
    let mut messages: Vec<*mut rd::rd_kafka_message_t> = vec![ptr::null_mut(); CHUNK.min(max_records)];
    let deadline = Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64);
    let mut taken = 0usize;
    if !fill {
        // The first arrival, waiting at most the timeout; then what came with it.
        let message = rd::rd_kafka_consumer_poll(rk, timeout_ms.max(0));
        if message.is_null() {
            return batch;
        }
        take(&mut batch, message);
        rd::rd_kafka_message_destroy(message);
        taken = 1;
    }
    while taken < max_records {
        // What is there now (a batch call with a wait would block until it has `want`).
        let want = (max_records - taken).min(messages.len());
        let events = batch.events.len();
        let got = rd::rd_kafka_consume_batch_queue(queue, 0, messages.as_mut_ptr(), want).max(0) as usize;
        for &message in &messages[..got] {
            take(&mut batch, message);
            rd::rd_kafka_message_destroy(message);
        }
        taken += got;
        if got == want {
            continue;
        }
        // A partition's end (or an error) ends the wait for a whole chunk: no more records
        // are coming there now, and a range read waits for exactly that event.
        if !fill || batch.events.len() > events {
            break;
        }
        let wait = deadline.saturating_duration_since(Instant::now()).as_millis() as i32;
        if wait <= 0 {
            break;
        }
        // Nothing more queued: wait for the next arrival only, then take what came with it.
        let message = rd::rd_kafka_consume_queue(queue, wait);
        if message.is_null() {
            break;
        }
        let is_event = (*message).err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR;
        take(&mut batch, message);
        rd::rd_kafka_message_destroy(message);
        taken += 1;
        if is_event {
            break;
        }
    }
    batch
}

unsafe fn slice<'a>(data: *const c_void, len: usize) -> &'a [u8] {
    if data.is_null() || len == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(data as *const u8, len)
    }
}

unsafe fn take(batch: &mut Batch, message: *mut rd::rd_kafka_message_t) {
    let m = &*message;
    if m.err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        batch.events.push((m.err, m.partition, m.offset));
        return;
    }
    if m.key.is_null() {
        // A changelog record has a key: an event (code 0, "NULL_KEY") for Python to name.
        batch.events.push((rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR, m.partition, m.offset));
        return;
    }
    let row = batch.rows;
    batch.keys.push(slice(m.key, m.key_len));
    if m.payload.is_null() {
        batch.values.push_null();
    } else {
        batch.values.push(slice(m.payload, m.len));
    }
    batch.partitions.push(m.partition);
    batch.offsets.push(m.offset);
    match batch.next.iter_mut().find(|(p, _)| *p == m.partition) {
        Some(slot) => slot.1 = slot.1.max(m.offset + 1),
        None => batch.next.push((m.partition, m.offset + 1)),
    }
    let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    let timestamp = rd::rd_kafka_message_timestamp(message, &mut kind);
    batch.timestamps.push(
        if kind == rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE { -1 } else { timestamp },
    );
    if batch.row_positions.is_some() {
        batch.timestamp_types.push(kind as i32);
    }
    batch.rows += 1;
    // Each path below pushes this row's own position exactly once when the feed wants it.
    let mut row_position: Option<Vec<(&[u8], i32, i64)>> = None;
    let mut headers: *mut rd::rd_kafka_headers_t = ptr::null_mut();
    if rd::rd_kafka_message_headers(message, &mut headers) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        || headers.is_null()
        || rd::rd_kafka_header_cnt(headers) == 0
    {
        batch.merged.without += 1;
        if let Some(rows) = batch.row_positions.as_mut() {
            rows.push(None);
        }
        return;
    }
    let count = rd::rd_kafka_header_cnt(headers);
    let mut version: Option<Option<&[u8]>> = None;
    let mut position: Option<Option<&[u8]>> = None;
    let mut others = false;
    for i in 0..count {
        let mut name: *const c_char = ptr::null();
        let mut value: *const c_void = ptr::null();
        let mut size = 0usize;
        rd::rd_kafka_header_get_all(headers, i, &mut name, &mut value, &mut size);
        let v = if value.is_null() { None } else { Some(slice(value, size)) };
        match CStr::from_ptr(name).to_bytes() {
            b"v" => version = Some(v),
            b"c" => position = Some(v),
            _ => others = true,
        }
    }
    if others {
        batch.kept.push((row, read_headers(headers, count, true)));
    }
    match version {
        None => batch.merged.without += 1,
        Some(Some(v)) if !v.is_empty() && v[0] == 0 => match position {
            Some(Some(c)) => match decode_entries(c) {
                Ok(entries) => {
                    batch.merged.add(&entries);
                    row_position = Some(entries);
                }
                Err(()) => batch.slow.push((row, read_headers(headers, count, false))),
            },
            _ => batch.slow.push((row, read_headers(headers, count, false))),
        },
        _ => batch.slow.push((row, read_headers(headers, count, false))),
    }
    if let Some(rows) = batch.row_positions.as_mut() {
        rows.push(row_position.as_deref());
    }
}

/// A record's headers in order; `others_only`: without `v` and `c`.
unsafe fn read_headers(headers: *const rd::rd_kafka_headers_t, count: usize, others_only: bool) -> Headers {
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let mut name: *const c_char = ptr::null();
        let mut value: *const c_void = ptr::null();
        let mut size = 0usize;
        rd::rd_kafka_header_get_all(headers, i, &mut name, &mut value, &mut size);
        let key = CStr::from_ptr(name).to_string_lossy().into_owned();
        if others_only && (key == "v" || key == "c") {
            continue;
        }
        let value = if value.is_null() { None } else { Some(slice(value, size).to_vec()) };
        out.push((key, value));
    }
    out
}
