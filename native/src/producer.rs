//! A transactional Kafka producer (librdkafka, the library confluent-kafka wraps) that
//! produces a chunk of rows in one call: the sink's changelog writer hands it the keys,
//! values, timestamps and partitions of up to a few thousand changes as Python lists, and
//! one position header set they all carry. Delivery reports are kept here (the end offset
//! of each changelog partition, the first error), so no Python call happens per record.
//!
//! What it does not decide it hands back: a field of another type than the reference
//! path's (`bytes` keys, `bytes`/None values, `int` partitions and timestamps) stops the
//! chunk at that row, and so does a full local queue; errors carry librdkafka's code and
//! flags, which the Python side turns into confluent-kafka's `KafkaError`, so the writer
//! classifies them (fenced, fatal, retriable, abortable) exactly as on the reference path.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;
use std::sync::Mutex;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use rdkafka_sys as rd;

use crate::db::lock_released;
use crate::kafka::{new_client, ClientError};
use crate::pyobj::{bytes_of, int_of};

create_exception!(
    spark_statestore_native,
    KafkaCallError,
    PyException,
    "A librdkafka error: args are (code, reason, fatal, retriable, txn_requires_abort)."
);

type Err = rd::rd_kafka_resp_err_t;

/// Delivery reports of the records produced since the last `take_deliveries`.
struct Deliveries {
    /// The topic whose partition ends are kept (the changelog).
    watched: CString,
    /// Highest acknowledged offset per partition of `watched`.
    ends: HashMap<i32, i64>,
    /// The first failed delivery (not counting records purged by an abort): code, topic,
    /// partition.
    error: Option<(i32, String, i32)>,
}

struct Client {
    rk: *mut rd::rd_kafka_t,
    topics: HashMap<String, *mut rd::rd_kafka_topic_t>,
}

unsafe impl Send for Client {}

impl Drop for Client {
    fn drop(&mut self) {
        unsafe {
            for (_, rkt) in self.topics.drain() {
                rd::rd_kafka_topic_destroy(rkt);
            }
            rd::rd_kafka_destroy(self.rk);
        }
    }
}

struct SendClient(#[allow(dead_code)] Client);

/// A producer for one changelog topic (and whatever other topic a record names, such as
/// the progress topic).
#[pyclass(frozen, module = "spark_statestore_native")]
pub struct Producer {
    // Dropped before `deliveries`: librdkafka may report while it is destroyed.
    client: Mutex<Option<Client>>,
    deliveries: Box<Mutex<Deliveries>>,
}

unsafe extern "C" fn on_delivery(
    _rk: *mut rd::rd_kafka_t,
    message: *const rd::rd_kafka_message_t,
    opaque: *mut c_void,
) {
    let state = &*(opaque as *const Mutex<Deliveries>);
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    let message = &*message;
    let name = CStr::from_ptr(rd::rd_kafka_topic_name(message.rkt));
    if message.err == Err::RD_KAFKA_RESP_ERR_NO_ERROR {
        if name == state.watched.as_c_str() {
            let end = state.ends.entry(message.partition).or_insert(-1);
            if message.offset > *end {
                *end = message.offset;
            }
        }
    } else if state.error.is_none()
        && message.err != Err::RD_KAFKA_RESP_ERR__PURGE_QUEUE
        && message.err != Err::RD_KAFKA_RESP_ERR__PURGE_INFLIGHT
    {
        state.error = Some((message.err as i32, name.to_string_lossy().into_owned(), message.partition));
    }
}

fn err2str(code: Err) -> String {
    unsafe { CStr::from_ptr(rd::rd_kafka_err2str(code)).to_string_lossy().into_owned() }
}

fn call_error(code: i32, reason: String, fatal: bool, retriable: bool, abortable: bool) -> PyErr {
    KafkaCallError::new_err((code, reason, fatal, retriable, abortable))
}

/// The Python error of a transactional call's `rd_kafka_error_t` (destroyed here).
unsafe fn take_error(error: *mut rd::rd_kafka_error_t) -> PyResult<()> {
    if error.is_null() {
        return Ok(());
    }
    let code = rd::rd_kafka_error_code(error) as i32;
    let reason = CStr::from_ptr(rd::rd_kafka_error_string(error)).to_string_lossy().into_owned();
    let fatal = rd::rd_kafka_error_is_fatal(error) != 0;
    let retriable = rd::rd_kafka_error_is_retriable(error) != 0;
    let abortable = rd::rd_kafka_error_txn_requires_abort(error) != 0;
    rd::rd_kafka_error_destroy(error);
    Err(call_error(code, reason, fatal, retriable, abortable))
}

fn closed() -> PyErr {
    PyRuntimeError::new_err("the Kafka producer is closed")
}

/// One row of plain fields: its key's and value's bytes (address, length) in the caller's
/// `bytes` objects, its partition and timestamp.
struct PlainRow {
    key: (usize, usize),
    value: Option<(usize, usize)>,
    partition: i32,
    stamp: i64,
}

/// A row stopped the chunk: a field of another type than the plain ones, or a full queue.
const STOP_NOT_PLAIN: u8 = 1;
const STOP_QUEUE_FULL: u8 = 2;

#[pymethods]
impl Producer {
    /// `settings`: librdkafka properties as strings (confluent-kafka's configuration without
    /// Python callbacks); `watched`: the topic whose acknowledged partition ends are kept.
    #[new]
    fn new(settings: Vec<(String, String)>, watched: &str) -> PyResult<Self> {
        let watched = CString::new(watched).map_err(|_| PyValueError::new_err("topic contains NUL"))?;
        let deliveries = Box::new(Mutex::new(Deliveries { watched, ends: HashMap::new(), error: None }));
        let opaque = &*deliveries as *const Mutex<Deliveries> as *mut c_void;
        let rk = unsafe {
            new_client(rd::rd_kafka_type_t::RD_KAFKA_PRODUCER, &settings, |conf| {
                rd::rd_kafka_conf_set_dr_msg_cb(conf, Some(on_delivery));
                rd::rd_kafka_conf_set_opaque(conf, opaque);
            })
        };
        match rk {
            Ok(rk) => Ok(Producer { client: Mutex::new(Some(Client { rk, topics: HashMap::new() })), deliveries }),
            Err(ClientError::Nul(name)) => Err(PyValueError::new_err(format!("setting {name:?} contains NUL"))),
            Err(ClientError::Refused(text)) => {
                Err(call_error(Err::RD_KAFKA_RESP_ERR__INVALID_ARG as i32, text, false, false, false))
            }
        }
    }

    fn init_transactions(&self, py: Python<'_>, timeout_ms: i32) -> PyResult<()> {
        self.transactional(py, |rk| unsafe { rd::rd_kafka_init_transactions(rk, timeout_ms) })
    }

    fn begin_transaction(&self, py: Python<'_>) -> PyResult<()> {
        self.transactional(py, |rk| unsafe { rd::rd_kafka_begin_transaction(rk) })
    }

    fn commit_transaction(&self, py: Python<'_>, timeout_ms: i32) -> PyResult<()> {
        self.transactional(py, |rk| unsafe { rd::rd_kafka_commit_transaction(rk, timeout_ms) })
    }

    fn abort_transaction(&self, py: Python<'_>, timeout_ms: i32) -> PyResult<()> {
        self.transactional(py, |rk| unsafe { rd::rd_kafka_abort_transaction(rk, timeout_ms) })
    }

    /// Produce rows `start..` of the lists to `topic`, each with a copy of `headers`.
    ///
    /// Returns `(next, stop)`: every row before `next` was handed to librdkafka; `stop` is 0
    /// when all were, 1 when row `next` has a field of another type than the plain ones
    /// (`bytes` key, `bytes` or None value, `int` partition and timestamp), 2 when the
    /// local queue is full (serve deliveries, then call again from `next`). Any other
    /// refusal raises `KafkaCallError`, with `next` the row refused in its reason.
    #[pyo3(signature = (topic, keys, values, partitions, timestamps, headers=None, start=0))]
    #[allow(clippy::too_many_arguments)]
    fn produce_rows<'py>(
        &self,
        py: Python<'py>,
        topic: &str,
        keys: &Bound<'py, PyAny>,
        values: &Bound<'py, PyAny>,
        partitions: &Bound<'py, PyAny>,
        timestamps: &Bound<'py, PyAny>,
        headers: Option<Vec<(String, Vec<u8>)>>,
        start: usize,
    ) -> PyResult<(usize, u8)> {
        let mut guard = lock_released(py, &self.client);
        let client = guard.as_mut().ok_or_else(closed)?;
        let rkt = client.topic(topic)?;
        let lists = [keys, values, partitions, timestamps];
        let mut items: Vec<Vec<*mut ffi::PyObject>> = Vec::with_capacity(4);
        for list in lists {
            let ptr = list.as_ptr();
            if unsafe { ffi::PyList_CheckExact(ptr) } == 0 {
                return Err(PyValueError::new_err("produce_rows takes lists"));
            }
            let n = unsafe { ffi::PyList_GET_SIZE(ptr) };
            items.push((0..n).map(|i| unsafe { ffi::PyList_GET_ITEM(ptr, i) }).collect());
        }
        let len = items[0].len();
        if items.iter().any(|column| column.len() != len) {
            return Err(PyValueError::new_err("produce_rows: the lists differ in length"));
        }
        let names: Vec<(CString, Vec<u8>)> = match headers {
            None => Vec::new(),
            Some(list) => list
                .into_iter()
                .map(|(name, value)| CString::new(name).map(|n| (n, value)))
                .collect::<Result<_, _>>()
                .map_err(|_| PyValueError::new_err("a header name contains NUL"))?,
        };
        // The rows' fields are read with the GIL held; the bytes stay alive in the caller's
        // lists, so librdkafka copies them with the GIL released (the host's other task
        // streams run meanwhile).
        let none = unsafe { ffi::Py_None() };
        let mut rows: Vec<PlainRow> = Vec::with_capacity(len.saturating_sub(start));
        let mut plain_end = len;
        for row in start..len {
            unsafe {
                let key = bytes_of(items[0][row]);
                let value = items[1][row];
                let value = if value == none { Some(None) } else { bytes_of(value).map(Some) };
                let (Some(key), Some(value), Some(partition), Some(stamp)) =
                    (key, value, int_of(items[2][row]), int_of(items[3][row]))
                else {
                    plain_end = row;
                    break;
                };
                if partition < i32::MIN as i64 || partition > i32::MAX as i64 {
                    plain_end = row;
                    break;
                }
                rows.push(PlainRow {
                    key: (key.as_ptr() as usize, key.len()),
                    value: value.map(|v| (v.as_ptr() as usize, v.len())),
                    partition: partition as i32,
                    stamp,
                });
            }
        }
        let (rk, rkt) = (client.rk as usize, rkt as usize);
        let names = &names;
        let rows = &rows;
        let (next, err) = py.detach(move || unsafe {
            let (rk, rkt) = (rk as *mut rd::rd_kafka_t, rkt as *mut rd::rd_kafka_topic_t);
            let mut outcome = (start + rows.len(), Err::RD_KAFKA_RESP_ERR_NO_ERROR);
            for (index, row) in rows.iter().enumerate() {
                let hdrs = if names.is_empty() {
                    ptr::null_mut()
                } else {
                    let hdrs = rd::rd_kafka_headers_new(names.len());
                    for (name, data) in names {
                        rd::rd_kafka_header_add(hdrs, name.as_ptr(), -1, data.as_ptr() as *const c_void, data.len() as isize);
                    }
                    hdrs
                };
                let key = std::slice::from_raw_parts(row.key.0 as *const u8, row.key.1);
                let value = row.value.map(|(at, n)| std::slice::from_raw_parts(at as *const u8, n));
                let err = produce_one(rk, rkt, row.partition, key, value, row.stamp, hdrs);
                if err != Err::RD_KAFKA_RESP_ERR_NO_ERROR {
                    if !hdrs.is_null() {
                        rd::rd_kafka_headers_destroy(hdrs); // not taken on failure
                    }
                    outcome = (start + index, err);
                    break;
                }
            }
            // Serve the delivery reports so far (ours, no Python): done here, while the
            // tasks stream, they neither pile up for the commit's flush nor fill the queue.
            rd::rd_kafka_poll(rk, 0);
            outcome
        });
        if err == Err::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Ok(if plain_end < len { (plain_end, STOP_NOT_PLAIN) } else { (len, 0) });
        }
        if err == Err::RD_KAFKA_RESP_ERR__QUEUE_FULL {
            return Ok((next, STOP_QUEUE_FULL));
        }
        Err(call_error(
            err as i32,
            format!("Unable to produce message: {}", err2str(err)),
            false,
            false,
            false,
        ))
    }

    /// Serve delivery reports for up to `timeout_ms`; the number served.
    fn poll(&self, py: Python<'_>, timeout_ms: i32) -> PyResult<i32> {
        let guard = lock_released(py, &self.client);
        let rk = guard.as_ref().ok_or_else(closed)?.rk as usize;
        Ok(py.detach(|| unsafe { rd::rd_kafka_poll(rk as *mut _, timeout_ms) }))
    }

    /// Wait up to `timeout_ms` for every record to be acknowledged (serving the reports);
    /// the number still outstanding.
    fn flush(&self, py: Python<'_>, timeout_ms: i32) -> PyResult<i32> {
        let guard = lock_released(py, &self.client);
        let rk = guard.as_ref().ok_or_else(closed)?.rk as usize;
        Ok(py.detach(|| unsafe {
            rd::rd_kafka_flush(rk as *mut _, timeout_ms);
            rd::rd_kafka_outq_len(rk as *mut _)
        }))
    }

    /// Records (and requests) not yet acknowledged.
    fn outstanding(&self, py: Python<'_>) -> PyResult<i32> {
        let guard = lock_released(py, &self.client);
        let rk = guard.as_ref().ok_or_else(closed)?.rk;
        Ok(unsafe { rd::rd_kafka_outq_len(rk) })
    }

    /// `(ends, error)` of the records reported since the last call, and forget them: `ends`
    /// `{partition: highest acknowledged offset}` of the watched topic, `error` the first
    /// failed delivery `(code, topic, partition)` or None.
    fn take_deliveries<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let (ends, error) = {
            let mut state = self.deliveries.lock().unwrap_or_else(|e| e.into_inner());
            (std::mem::take(&mut state.ends), state.error.take())
        };
        let dict = PyDict::new(py);
        for (partition, offset) in ends {
            dict.set_item(partition, offset)?;
        }
        (dict, error).into_pyobject(py)
    }

    /// `(code, reason)` of the producer's fatal error, or None.
    fn fatal_error(&self, py: Python<'_>) -> PyResult<Option<(i32, String)>> {
        let guard = lock_released(py, &self.client);
        let rk = guard.as_ref().ok_or_else(closed)?.rk;
        let mut text = [0 as c_char; 512];
        let code = unsafe { rd::rd_kafka_fatal_error(rk, text.as_mut_ptr(), text.len()) };
        if code == Err::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Ok(None);
        }
        Ok(Some((code as i32, unsafe { CStr::from_ptr(text.as_ptr()) }.to_string_lossy().into_owned())))
    }

    /// `(error code, topic error code, partition count)` of `topic` from the cluster's
    /// metadata (codes 0: none).
    fn topic_metadata(&self, py: Python<'_>, topic: &str, timeout_ms: i32) -> PyResult<(i32, i32, i32)> {
        let mut guard = lock_released(py, &self.client);
        let client = guard.as_mut().ok_or_else(closed)?;
        let rkt = client.topic(topic)? as usize;
        let rk = client.rk as usize;
        Ok(py.detach(|| unsafe {
            let mut metadata: *const rd::rd_kafka_metadata = ptr::null();
            let err = rd::rd_kafka_metadata(rk as *mut _, 0, rkt as *mut _, &mut metadata, timeout_ms);
            if err != Err::RD_KAFKA_RESP_ERR_NO_ERROR {
                return (err as i32, 0, 0);
            }
            let md = &*metadata;
            let mut out = (0, Err::RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC as i32, 0);
            for i in 0..md.topic_cnt as usize {
                let entry = &*md.topics.add(i);
                if CStr::from_ptr(entry.topic).to_bytes() == topic_bytes(rkt as *mut _) {
                    out = (0, entry.err as i32, entry.partition_cnt);
                }
            }
            rd::rd_kafka_metadata_destroy(metadata);
            out
        }))
    }

    /// Destroy the producer (idempotent); outstanding records are dropped.
    fn close(&self, py: Python<'_>) {
        let client = lock_released(py, &self.client).take();
        if let Some(client) = client {
            let client = SendClient(client);
            py.detach(move || drop(client));
        }
    }
}

impl Producer {
    fn transactional(
        &self,
        py: Python<'_>,
        call: impl FnOnce(*mut rd::rd_kafka_t) -> *mut rd::rd_kafka_error_t + Send,
    ) -> PyResult<()> {
        let guard = lock_released(py, &self.client);
        let rk = guard.as_ref().ok_or_else(closed)?.rk as usize;
        let error = py.detach(|| call(rk as *mut _) as usize);
        unsafe { take_error(error as *mut _) }
    }
}

impl Client {
    fn topic(&mut self, name: &str) -> PyResult<*mut rd::rd_kafka_topic_t> {
        if let Some(rkt) = self.topics.get(name) {
            return Ok(*rkt);
        }
        let c_name = CString::new(name).map_err(|_| PyValueError::new_err("topic contains NUL"))?;
        let rkt = unsafe { rd::rd_kafka_topic_new(self.rk, c_name.as_ptr(), ptr::null_mut()) };
        if rkt.is_null() {
            let err = unsafe { rd::rd_kafka_last_error() };
            return Err(call_error(err as i32, format!("topic {name:?}: {}", err2str(err)), false, false, false));
        }
        self.topics.insert(name.to_string(), rkt);
        Ok(rkt)
    }
}

unsafe fn topic_bytes<'a>(rkt: *mut rd::rd_kafka_topic_t) -> &'a [u8] {
    CStr::from_ptr(rd::rd_kafka_topic_name(rkt)).to_bytes()
}

unsafe fn produce_one(
    rk: *mut rd::rd_kafka_t,
    rkt: *mut rd::rd_kafka_topic_t,
    partition: i32,
    key: &[u8],
    value: Option<&[u8]>,
    stamp: i64,
    headers: *mut rd::rd_kafka_headers_t,
) -> Err {
    use rd::rd_kafka_vtype_t as V;
    let mut vus: [rd::rd_kafka_vu_t; 7] = std::mem::zeroed();
    vus[0].vtype = V::RD_KAFKA_VTYPE_RKT;
    vus[0].u.rkt = rkt;
    vus[1].vtype = V::RD_KAFKA_VTYPE_PARTITION;
    vus[1].u.i32_ = partition;
    vus[2].vtype = V::RD_KAFKA_VTYPE_MSGFLAGS;
    vus[2].u.i = rd::RD_KAFKA_MSG_F_COPY;
    vus[3].vtype = V::RD_KAFKA_VTYPE_KEY;
    vus[3].u.mem.ptr = key.as_ptr() as *mut c_void;
    vus[3].u.mem.size = key.len();
    vus[4].vtype = V::RD_KAFKA_VTYPE_VALUE;
    match value {
        Some(v) => {
            vus[4].u.mem.ptr = v.as_ptr() as *mut c_void;
            vus[4].u.mem.size = v.len();
        }
        None => {
            vus[4].u.mem.ptr = ptr::null_mut(); // a tombstone
            vus[4].u.mem.size = 0;
        }
    }
    vus[5].vtype = V::RD_KAFKA_VTYPE_TIMESTAMP;
    vus[5].u.i64_ = stamp;
    let mut count = 6;
    if !headers.is_null() {
        vus[6].vtype = V::RD_KAFKA_VTYPE_HEADERS;
        vus[6].u.headers = headers;
        count = 7;
    }
    let error = rd::rd_kafka_produceva(rk, vus.as_ptr(), count);
    if error.is_null() {
        return Err::RD_KAFKA_RESP_ERR_NO_ERROR;
    }
    let code = rd::rd_kafka_error_code(error);
    rd::rd_kafka_error_destroy(error);
    code
}
