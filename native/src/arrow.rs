//! Reading Arrow arrays through the Arrow C data interface (`__arrow_c_array__`), without
//! copying, and building Arrow buffers that Python wraps with `pyarrow.Array.from_buffers`.

use std::ffi::{c_char, c_void, CStr};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyCapsuleMethods, PyTuple};

#[repr(C)]
struct ArrowSchema {
    format: *const c_char,
    name: *const c_char,
    metadata: *const c_char,
    flags: i64,
    n_children: i64,
    children: *mut *mut ArrowSchema,
    dictionary: *mut ArrowSchema,
    release: Option<unsafe extern "C" fn(*mut ArrowSchema)>,
    private_data: *mut c_void,
}

#[repr(C)]
struct ArrowArray {
    length: i64,
    null_count: i64,
    offset: i64,
    n_buffers: i64,
    n_children: i64,
    buffers: *mut *const c_void,
    children: *mut *mut ArrowArray,
    dictionary: *mut ArrowArray,
    release: Option<unsafe extern "C" fn(*mut ArrowArray)>,
    private_data: *mut c_void,
}

/// One column borrowed from a Python Arrow array; the capsules it holds keep the memory.
pub struct Column<'py> {
    _capsules: Bound<'py, PyTuple>,
    pub len: usize,
    offset: usize,
    validity: *const u8,
    kind: Kind,
    values: *const u8,
    data: *const u8,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Binary,
    LargeBinary,
    Int32,
    Int64,
    Null,
}

impl<'py> Column<'py> {
    /// Borrows `obj` (a pyarrow Array, or anything with `__arrow_c_array__`).
    pub fn borrow(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Self> {
        let capsules = obj
            .call_method0("__arrow_c_array__")
            .map_err(|e| PyTypeError::new_err(format!("{what} must be an Arrow array ({e})")))?;
        let capsules = capsules.cast_into::<PyTuple>().map_err(|_| {
            PyTypeError::new_err(format!("{what}: __arrow_c_array__ did not return a tuple"))
        })?;
        let schema = capsules.get_item(0)?;
        let array = capsules.get_item(1)?;
        let schema = schema.cast::<PyCapsule>()?.pointer_checked(Some(c"arrow_schema"))?;
        let array = array.cast::<PyCapsule>()?.pointer_checked(Some(c"arrow_array"))?;
        let (schema, array) = unsafe {
            (&*(schema.as_ptr() as *const ArrowSchema), &*(array.as_ptr() as *const ArrowArray))
        };
        let format = unsafe { CStr::from_ptr(schema.format) }.to_bytes();
        let kind = match format {
            b"z" | b"u" => Kind::Binary,
            b"Z" | b"U" => Kind::LargeBinary,
            b"i" => Kind::Int32,
            b"l" => Kind::Int64,
            b"n" => Kind::Null,
            other => {
                return Err(PyTypeError::new_err(format!(
                    "{what} must be binary, string, int32 or int64, got Arrow format {:?}",
                    String::from_utf8_lossy(other)
                )))
            }
        };
        let buffer = |i: usize| -> *const u8 {
            if (i as i64) < array.n_buffers {
                unsafe { *array.buffers.add(i) as *const u8 }
            } else {
                std::ptr::null()
            }
        };
        let (validity, values, data) = match kind {
            Kind::Binary | Kind::LargeBinary => (buffer(0), buffer(1), buffer(2)),
            Kind::Int32 | Kind::Int64 => (buffer(0), buffer(1), std::ptr::null()),
            Kind::Null => (std::ptr::null(), std::ptr::null(), std::ptr::null()),
        };
        Ok(Column {
            _capsules: capsules,
            len: array.length as usize,
            offset: array.offset as usize,
            validity: if array.null_count == 0 { std::ptr::null() } else { validity },
            kind,
            values,
            data,
        })
    }

    pub fn is_null(&self, i: usize) -> bool {
        if self.kind == Kind::Null {
            return true;
        }
        if self.validity.is_null() {
            return false;
        }
        let bit = self.offset + i;
        unsafe { (*self.validity.add(bit / 8) >> (bit % 8)) & 1 == 0 }
    }

    /// The bytes of row `i` of a binary or string column (empty when null).
    pub fn bytes(&self, i: usize) -> &[u8] {
        let at = self.offset + i;
        unsafe {
            let (start, end) = match self.kind {
                Kind::Binary => {
                    let offsets = self.values as *const i32;
                    (*offsets.add(at) as usize, *offsets.add(at + 1) as usize)
                }
                Kind::LargeBinary => {
                    let offsets = self.values as *const i64;
                    (*offsets.add(at) as usize, *offsets.add(at + 1) as usize)
                }
                _ => return &[],
            };
            if end <= start {
                return &[];
            }
            std::slice::from_raw_parts(self.data.add(start), end - start)
        }
    }

    /// Row `i` of an integer column (None when null).
    pub fn int(&self, i: usize) -> Option<i64> {
        if self.is_null(i) {
            return None;
        }
        let at = self.offset + i;
        unsafe {
            match self.kind {
                Kind::Int32 => Some(*(self.values as *const i32).add(at) as i64),
                Kind::Int64 => Some(*(self.values as *const i64).add(at)),
                _ => None,
            }
        }
    }

    pub fn is_binary(&self) -> bool {
        matches!(self.kind, Kind::Binary | Kind::LargeBinary | Kind::Null)
    }

    pub fn is_int(&self) -> bool {
        matches!(self.kind, Kind::Int32 | Kind::Int64)
    }
}

/// Checks that every column has `len` rows and the kind it must have.
pub fn check_columns(binary: &[(&Column, &str)], ints: &[(&Column, &str)], len: usize) -> PyResult<()> {
    for (column, what) in binary {
        if !column.is_binary() {
            return Err(PyTypeError::new_err(format!("{what} must be a binary or string array")));
        }
    }
    for (column, what) in ints {
        if !column.is_int() {
            return Err(PyTypeError::new_err(format!("{what} must be an int32 or int64 array")));
        }
    }
    for (column, what) in binary.iter().chain(ints.iter()) {
        if column.len != len {
            return Err(PyValueError::new_err(format!(
                "{what} has {} rows, the other columns {len}",
                column.len
            )));
        }
    }
    Ok(())
}

/// A binary column being built: Arrow's int32 offsets, data and validity bitmap.
#[derive(Default)]
pub struct BinaryBuilder {
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
    pub validity: Vec<u8>,
    pub nulls: usize,
    pub len: usize,
}

impl BinaryBuilder {
    pub fn with_capacity(rows: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        BinaryBuilder { offsets, data: Vec::with_capacity(bytes), validity: Vec::new(), nulls: 0, len: 0 }
    }

    fn set_valid(&mut self, valid: bool) {
        let i = self.len;
        if i / 8 >= self.validity.len() {
            self.validity.push(0);
        }
        if valid {
            self.validity[i / 8] |= 1 << (i % 8);
        } else {
            self.nulls += 1;
        }
        self.len += 1;
    }

    pub fn push(&mut self, value: &[u8]) {
        self.data.extend_from_slice(value);
        self.offsets.push(self.data.len() as i32);
        self.set_valid(true);
    }

    pub fn push_null(&mut self) {
        self.offsets.push(self.data.len() as i32);
        self.set_valid(false);
    }

    pub fn fits(&self, more: usize) -> bool {
        self.data.len() + more <= i32::MAX as usize
    }

    /// `(validity or None, offsets, data)` as Python bytes.
    pub fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let validity = if self.nulls == 0 {
            py.None().into_bound(py)
        } else {
            PyBytes::new(py, &self.validity).into_any()
        };
        let offsets = PyBytes::new(py, as_bytes_i32(&self.offsets)).into_any();
        let data = PyBytes::new(py, &self.data).into_any();
        PyTuple::new(py, [validity, offsets, data])
    }
}

pub fn as_bytes_i32(values: &[i32]) -> &[u8] {
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values)) }
}

pub fn as_bytes_i64(values: &[i64]) -> &[u8] {
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values)) }
}
