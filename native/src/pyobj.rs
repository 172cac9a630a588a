//! Plain Python values read in place (borrowed, exact types only): the hot loops' view of
//! the lists they are handed.

use pyo3::ffi;

/// The bytes of an exact `bytes` object (borrowed for as long as it lives), else None.
pub(crate) unsafe fn bytes_of<'a>(obj: *mut ffi::PyObject) -> Option<&'a [u8]> {
    if ffi::PyBytes_CheckExact(obj) == 0 {
        return None;
    }
    let data = ffi::PyBytes_AsString(obj) as *const u8;
    Some(std::slice::from_raw_parts(data, ffi::PyBytes_Size(obj) as usize))
}

/// The value of an exact `int` within int64, else None (no Python error left set).
pub(crate) unsafe fn int_of(obj: *mut ffi::PyObject) -> Option<i64> {
    if ffi::PyLong_CheckExact(obj) == 0 {
        return None;
    }
    let mut overflow: std::os::raw::c_int = 0;
    let value = ffi::PyLong_AsLongLongAndOverflow(obj, &mut overflow);
    if overflow != 0 || (value == -1 && !ffi::PyErr_Occurred().is_null()) {
        ffi::PyErr_Clear();
        return None;
    }
    Some(value)
}
