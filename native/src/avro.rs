//! Avro values (a registry serializer's frame, or bare) decoded in bulk straight into one
//! Arrow array: Apache Arrow's `arrow-avro` decodes each value with its writer schema,
//! resolved to the reader schema, into Arrow builders; `avro_columns` turns its columns into
//! the column type the Python reference path gives. No Python object per value.
//!
//! The schemas come from `spark_statestore.schemas.avro_native`, which hands over only what
//! this path answers exactly as the reference path (fastavro) does. Anything else here (a bad
//! frame, an id it was not given, bytes left after a value, a decode or resolution error, a
//! value the column cannot hold) raises `AvroFastPathRefused`: the caller then decodes the
//! whole batch on the reference path, which names the value and the reason.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Mutex, MutexGuard};

use arrow_array::ffi::{to_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::{new_null_array, Array, ArrayRef};
use arrow_avro::reader::{Decoder, DecoderMode, ReaderBuilder};
use arrow_avro::schema::{AvroSchema, Fingerprint, FingerprintAlgorithm, SchemaStore};
use arrow_schema::DataType;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyTuple};

use crate::arrow::Column;
use crate::avro_columns::to_column;

create_exception!(
    spark_statestore_native,
    AvroFastPathRefused,
    PyException,
    "The compiled Avro path does not answer for this batch: decode it on the reference path."
);

/// The id a bare (unframed) value's one writer schema is kept under.
const BARE: i32 = 0;
const FRAME_HEADER: usize = 5;

fn refused(message: impl Into<String>) -> PyErr {
    AvroFastPathRefused::new_err(message.into())
}

struct Writer {
    writer_json: String,
    reader_json: String,
    /// Built on first use and after a batch that failed (its builders may hold part of it).
    decoder: Option<Decoder>,
}

impl Writer {
    fn decoder(&mut self) -> Result<&mut Decoder, String> {
        if self.decoder.is_none() {
            self.decoder = Some(build_decoder(&self.writer_json, &self.reader_json)?);
        }
        Ok(self.decoder.as_mut().expect("just built"))
    }
}

fn build_decoder(writer_json: &str, reader_json: &str) -> Result<Decoder, String> {
    let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
    let fingerprint = Fingerprint::Id(0);
    store
        .set(fingerprint, AvroSchema::new(writer_json.to_string()))
        .map_err(|e| format!("writer schema: {e}"))?;
    ReaderBuilder::new()
        .with_writer_schema_store(store)
        .with_active_fingerprint(fingerprint)
        .with_reader_schema(AvroSchema::new(reader_json.to_string()))
        .with_decoder_mode(DecoderMode::UnframedDatum)
        .with_batch_size(usize::MAX / 2)
        .build_decoder()
        .map_err(|e| format!("{e}"))
}

/// Decodes batches of one column's Avro values into Arrow arrays of one type.
#[pyclass(frozen, module = "spark_statestore_native")]
pub struct AvroColumnDecoder {
    framed: bool,
    target: DataType,
    /// Taken only while no Python code runs (so never waited for): a call that finds it
    /// taken is refused.
    writers: Mutex<HashMap<i32, Writer>>,
}

#[pymethods]
impl AvroColumnDecoder {
    /// `framed`: values carry a registry frame (else bare Avro of one writer schema);
    /// `target`: the column's Arrow type (anything with `__arrow_c_schema__`).
    #[new]
    fn new(framed: bool, target: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(AvroColumnDecoder { framed, target: import_type(target)?, writers: Mutex::new(HashMap::new()) })
    }

    /// Decode the values framed with `schema_id` (None for bare values) with `writer_json`,
    /// resolved to `reader_json` (both self-contained Avro schemas whose values are records
    /// with one field, `v`). Raises AvroFastPathRefused when arrow-avro refuses them.
    #[pyo3(signature = (schema_id, writer_json, reader_json))]
    fn add_writer(&self, schema_id: Option<i32>, writer_json: String, reader_json: String) -> PyResult<()> {
        let decoder = build_decoder(&writer_json, &reader_json).map_err(refused)?;
        let key = schema_id.unwrap_or(BARE);
        self.writers()?.insert(key, Writer { writer_json, reader_json, decoder: Some(decoder) });
        Ok(())
    }

    /// The distinct schema ids of the framed values in `values` (an Arrow binary array), in
    /// the order they first appear. Raises AvroFastPathRefused for a value without a frame.
    fn schema_ids(&self, values: &Bound<'_, PyAny>) -> PyResult<Vec<i32>> {
        let column = binary_column(values)?;
        let mut ids: Vec<i32> = Vec::new();
        for row in 0..column.len {
            if column.is_null(row) {
                continue;
            }
            let (id, _) = frame(column.bytes(row))?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        Ok(ids)
    }

    /// `values` (an Arrow binary array; nulls stay null) decoded into one array of the
    /// target type, as an object with `__arrow_c_array__`.
    fn decode(&self, values: &Bound<'_, PyAny>) -> PyResult<ArrowArrayExport> {
        let column = binary_column(values)?;
        let mut writers = self.writers()?;
        let result = self.decode_column(&column, &mut writers);
        if result.is_err() {
            // A failed value may have left part of itself in the builders.
            for writer in writers.values_mut() {
                writer.decoder = None;
            }
        }
        drop(writers);
        let array = result.map_err(refused)?;
        let (array, schema) = to_ffi(&array.to_data()).map_err(|e| refused(format!("export: {e}")))?;
        Ok(ArrowArrayExport { exported: Mutex::new(Some((array, schema))) })
    }
}

impl AvroColumnDecoder {
    fn writers(&self) -> PyResult<MutexGuard<'_, HashMap<i32, Writer>>> {
        self.writers.try_lock().map_err(|_| refused("the decoder is in use by another thread"))
    }

    fn decode_column(&self, column: &Column<'_>, writers: &mut HashMap<i32, Writer>) -> Result<ArrayRef, String> {
        // Which writer (part) each row went to, and its row there; None for a null.
        let mut parts: Vec<i32> = Vec::new();
        let mut counts: Vec<usize> = Vec::new();
        let mut rows: Vec<Option<(usize, usize)>> = Vec::with_capacity(column.len);
        for row in 0..column.len {
            if column.is_null(row) {
                rows.push(None);
                continue;
            }
            let raw = column.bytes(row);
            let (id, payload) = if self.framed { frame(raw).map_err(|e| e.to_string())? } else { (BARE, raw) };
            let part = match parts.iter().position(|&known| known == id) {
                Some(part) => part,
                None => {
                    parts.push(id);
                    counts.push(0);
                    parts.len() - 1
                }
            };
            let writer = writers
                .get_mut(&id)
                .ok_or_else(|| format!("no writer schema was given for schema id {id}"))?;
            let consumed = writer.decoder()?.decode(payload).map_err(|e| format!("row {row}: {e}"))?;
            if consumed != payload.len() {
                return Err(format!("row {row}: {} byte(s) left after the value", payload.len() - consumed));
            }
            rows.push(Some((part, counts[part])));
            counts[part] += 1;
        }
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(parts.len() + 1);
        for id in &parts {
            let writer = writers.get_mut(id).expect("seen above");
            let batch = writer
                .decoder()?
                .flush()
                .map_err(|e| format!("{e}"))?
                .ok_or_else(|| "a decoder lost its rows".to_string())?;
            arrays.push(to_column(batch.column(0), &self.target)?);
        }
        if arrays.len() == 1 && rows.iter().all(Option::is_some) {
            return Ok(arrays.pop().expect("one part"));
        }
        if arrays.is_empty() && rows.is_empty() {
            return Ok(new_null_array(&self.target, 0));
        }
        let null_part = arrays.len();
        arrays.push(new_null_array(&self.target, 1));
        let indices: Vec<(usize, usize)> = rows.into_iter().map(|row| row.unwrap_or((null_part, 0))).collect();
        let sources: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
        arrow_select::interleave::interleave(&sources, &indices).map_err(|e| format!("{e}"))
    }
}

fn binary_column<'py>(values: &Bound<'py, PyAny>) -> PyResult<Column<'py>> {
    let column = Column::borrow(values, "values")?;
    if !column.is_binary() {
        return Err(PyTypeError::new_err("values must be a binary array"));
    }
    Ok(column)
}

/// The schema id and payload of a registry frame (magic byte 0, a big-endian 32-bit id).
fn frame(raw: &[u8]) -> PyResult<(i32, &[u8])> {
    if raw.len() < FRAME_HEADER || raw[0] != 0 {
        return Err(refused("a value without a registry frame"));
    }
    Ok((i32::from_be_bytes([raw[1], raw[2], raw[3], raw[4]]), &raw[FRAME_HEADER..]))
}

fn import_type(target: &Bound<'_, PyAny>) -> PyResult<DataType> {
    let capsule = target
        .call_method0("__arrow_c_schema__")
        .map_err(|e| PyTypeError::new_err(format!("target must be an Arrow type ({e})")))?;
    let capsule = capsule.cast_into::<PyCapsule>()?;
    let pointer = capsule.pointer_checked(Some(c"arrow_schema"))?;
    // The capsule keeps ownership (its destructor releases the schema): only borrowed here.
    let schema = unsafe { &*(pointer.as_ptr() as *const FFI_ArrowSchema) };
    DataType::try_from(schema).map_err(|e| PyTypeError::new_err(format!("target type: {e}")))
}

/// A decoded array handed to pyarrow once through the Arrow C data interface
/// (`pyarrow.array(export)`).
#[pyclass(module = "spark_statestore_native")]
pub struct ArrowArrayExport {
    exported: Mutex<Option<(FFI_ArrowArray, FFI_ArrowSchema)>>,
}

#[pymethods]
impl ArrowArrayExport {
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let _ = requested_schema; // the array is exported as it is
        let (array, schema) = self
            .exported
            .lock()
            .map_err(|_| PyTypeError::new_err("the array's export failed"))?
            .take()
            .ok_or_else(|| PyTypeError::new_err("the array was already exported"))?;
        let schema = PyCapsule::new(py, schema, Some(CString::from(c"arrow_schema")))?;
        let array = PyCapsule::new(py, array, Some(CString::from(c"arrow_array")))?;
        PyTuple::new(py, [schema.into_any(), array.into_any()])
    }
}
