//! spark-statestore's compiled hot loops (see docs/native.md): a LevelDB database with
//! plyvel's interface plus column operations, and a Kafka reader that hands out records as
//! Arrow columns, a Kafka producer that produces a chunk of rows per call, and Avro values decoded
//! into Arrow columns. The pure-Python paths stay the reference; both must give equal stores.

mod arrow;
mod avro;
mod avro_columns;
mod batch;
mod db;
mod envelopes;
mod errors;
mod kafka;
mod leveldb;
mod positions;
mod partitioner;
mod point;
mod producer;
mod pyobj;

use pyo3::prelude::*;

#[pymodule]
fn spark_statestore_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    // The package refuses an extension of another version (spark_statestore/native.py): the
    // two are released together, one version for both (native/Cargo.toml).
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<db::DB>()?;
    m.add_class::<db::Snapshot>()?;
    m.add_class::<db::Iterator>()?;
    m.add_class::<batch::WriteBatch>()?;
    m.add_class::<kafka::ColumnReader>()?;
    m.add_class::<producer::Producer>()?;
    m.add_class::<avro::AvroColumnDecoder>()?;
    m.add_class::<avro::ArrowArrayExport>()?;
    m.add("AvroFastPathRefused", py.get_type::<avro::AvroFastPathRefused>())?;
    m.add("KafkaCallError", py.get_type::<producer::KafkaCallError>())?;
    m.add_function(wrap_pyfunction!(decode_position_entries, m)?)?;
    m.add_function(wrap_pyfunction!(partitioner::partitions_for_keys, m)?)?;
    m.add_function(wrap_pyfunction!(partitioner::consecutive_offsets, m)?)?;
    m.add("Error", py.get_type::<errors::Error>())?;
    m.add("CorruptionError", py.get_type::<errors::CorruptionError>())?;
    m.add("IOError", py.get_type::<errors::IOError>())?;
    m.add("EnvelopeError", py.get_type::<errors::EnvelopeError>())?;
    m.add(
        "LIBRDKAFKA_VERSION",
        unsafe { std::ffi::CStr::from_ptr(rdkafka_sys::rd_kafka_version_str()) }
            .to_string_lossy()
            .into_owned(),
    )?;
    m.add(
        "LEVELDB_VERSION",
        unsafe { (leveldb::leveldb_major_version(), leveldb::leveldb_minor_version()) },
    )?;
    Ok(())
}

/// The entries of a `c` header value as the column reader decodes them, or None where it
/// hands the record to the Python rules (for the property test against the Python codec).
#[pyfunction]
fn decode_position_entries(data: &[u8]) -> Option<Vec<(String, i32, i64)>> {
    positions::decode_entries(data).ok().map(|entries| {
        entries
            .into_iter()
            .map(|(topic, p, o)| (String::from_utf8_lossy(topic).into_owned(), p, o))
            .collect()
    })
}
