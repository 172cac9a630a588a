//! LevelDB's C API (`leveldb/c.h`), the part this crate calls.
#![allow(non_camel_case_types, dead_code)]

use libc::{c_char, c_int, c_uchar, size_t};

#[repr(C)]
pub struct leveldb_t {
    _private: [u8; 0],
}
#[repr(C)]
pub struct leveldb_options_t {
    _private: [u8; 0],
}
#[repr(C)]
pub struct leveldb_readoptions_t {
    _private: [u8; 0],
}
#[repr(C)]
pub struct leveldb_writeoptions_t {
    _private: [u8; 0],
}
#[repr(C)]
pub struct leveldb_writebatch_t {
    _private: [u8; 0],
}
#[repr(C)]
pub struct leveldb_iterator_t {
    _private: [u8; 0],
}
#[repr(C)]
pub struct leveldb_snapshot_t {
    _private: [u8; 0],
}
#[repr(C)]
pub struct leveldb_cache_t {
    _private: [u8; 0],
}
#[repr(C)]
pub struct leveldb_filterpolicy_t {
    _private: [u8; 0],
}

pub const NO_COMPRESSION: c_int = 0;
pub const SNAPPY_COMPRESSION: c_int = 1;

extern "C" {
    pub fn leveldb_open(
        options: *const leveldb_options_t,
        name: *const c_char,
        errptr: *mut *mut c_char,
    ) -> *mut leveldb_t;
    pub fn leveldb_close(db: *mut leveldb_t);
    pub fn leveldb_write(
        db: *mut leveldb_t,
        options: *const leveldb_writeoptions_t,
        batch: *mut leveldb_writebatch_t,
        errptr: *mut *mut c_char,
    );
    pub fn leveldb_get(
        db: *mut leveldb_t,
        options: *const leveldb_readoptions_t,
        key: *const c_char,
        keylen: size_t,
        vallen: *mut size_t,
        errptr: *mut *mut c_char,
    ) -> *mut c_char;
    pub fn leveldb_create_iterator(
        db: *mut leveldb_t,
        options: *const leveldb_readoptions_t,
    ) -> *mut leveldb_iterator_t;
    pub fn leveldb_create_snapshot(db: *mut leveldb_t) -> *const leveldb_snapshot_t;
    pub fn leveldb_release_snapshot(db: *mut leveldb_t, snapshot: *const leveldb_snapshot_t);
    pub fn leveldb_property_value(db: *mut leveldb_t, propname: *const c_char) -> *mut c_char;
    pub fn leveldb_compact_range(
        db: *mut leveldb_t,
        start_key: *const c_char,
        start_key_len: size_t,
        limit_key: *const c_char,
        limit_key_len: size_t,
    );
    pub fn leveldb_approximate_sizes(
        db: *mut leveldb_t,
        num_ranges: c_int,
        range_start_key: *const *const c_char,
        range_start_key_len: *const size_t,
        range_limit_key: *const *const c_char,
        range_limit_key_len: *const size_t,
        sizes: *mut u64,
    );

    pub fn leveldb_iter_destroy(it: *mut leveldb_iterator_t);
    pub fn leveldb_iter_valid(it: *const leveldb_iterator_t) -> c_uchar;
    pub fn leveldb_iter_seek_to_first(it: *mut leveldb_iterator_t);
    pub fn leveldb_iter_seek_to_last(it: *mut leveldb_iterator_t);
    pub fn leveldb_iter_seek(it: *mut leveldb_iterator_t, k: *const c_char, klen: size_t);
    pub fn leveldb_iter_next(it: *mut leveldb_iterator_t);
    pub fn leveldb_iter_prev(it: *mut leveldb_iterator_t);
    pub fn leveldb_iter_key(it: *const leveldb_iterator_t, klen: *mut size_t) -> *const c_char;
    pub fn leveldb_iter_value(it: *const leveldb_iterator_t, vlen: *mut size_t) -> *const c_char;
    pub fn leveldb_iter_get_error(it: *const leveldb_iterator_t, errptr: *mut *mut c_char);

    pub fn leveldb_writebatch_create() -> *mut leveldb_writebatch_t;
    pub fn leveldb_writebatch_destroy(b: *mut leveldb_writebatch_t);
    pub fn leveldb_writebatch_clear(b: *mut leveldb_writebatch_t);
    pub fn leveldb_writebatch_put(
        b: *mut leveldb_writebatch_t,
        key: *const c_char,
        klen: size_t,
        val: *const c_char,
        vlen: size_t,
    );
    pub fn leveldb_writebatch_delete(
        b: *mut leveldb_writebatch_t,
        key: *const c_char,
        klen: size_t,
    );

    pub fn leveldb_options_create() -> *mut leveldb_options_t;
    pub fn leveldb_options_destroy(o: *mut leveldb_options_t);
    pub fn leveldb_options_set_filter_policy(
        o: *mut leveldb_options_t,
        policy: *mut leveldb_filterpolicy_t,
    );
    pub fn leveldb_options_set_create_if_missing(o: *mut leveldb_options_t, v: c_uchar);
    pub fn leveldb_options_set_error_if_exists(o: *mut leveldb_options_t, v: c_uchar);
    pub fn leveldb_options_set_paranoid_checks(o: *mut leveldb_options_t, v: c_uchar);
    pub fn leveldb_options_set_write_buffer_size(o: *mut leveldb_options_t, s: size_t);
    pub fn leveldb_options_set_max_open_files(o: *mut leveldb_options_t, n: c_int);
    pub fn leveldb_options_set_cache(o: *mut leveldb_options_t, c: *mut leveldb_cache_t);
    pub fn leveldb_options_set_block_size(o: *mut leveldb_options_t, s: size_t);
    pub fn leveldb_options_set_compression(o: *mut leveldb_options_t, c: c_int);

    pub fn leveldb_filterpolicy_create_bloom(bits_per_key: c_int) -> *mut leveldb_filterpolicy_t;
    pub fn leveldb_filterpolicy_destroy(p: *mut leveldb_filterpolicy_t);
    pub fn leveldb_cache_create_lru(capacity: size_t) -> *mut leveldb_cache_t;
    pub fn leveldb_cache_destroy(c: *mut leveldb_cache_t);

    pub fn leveldb_readoptions_create() -> *mut leveldb_readoptions_t;
    pub fn leveldb_readoptions_destroy(o: *mut leveldb_readoptions_t);
    pub fn leveldb_readoptions_set_verify_checksums(o: *mut leveldb_readoptions_t, v: c_uchar);
    pub fn leveldb_readoptions_set_fill_cache(o: *mut leveldb_readoptions_t, v: c_uchar);
    pub fn leveldb_readoptions_set_snapshot(
        o: *mut leveldb_readoptions_t,
        s: *const leveldb_snapshot_t,
    );
    pub fn leveldb_writeoptions_create() -> *mut leveldb_writeoptions_t;
    pub fn leveldb_writeoptions_destroy(o: *mut leveldb_writeoptions_t);
    pub fn leveldb_writeoptions_set_sync(o: *mut leveldb_writeoptions_t, v: c_uchar);

    pub fn leveldb_free(ptr: *mut libc::c_void);
    pub fn leveldb_major_version() -> c_int;
    pub fn leveldb_minor_version() -> c_int;
}

/// Takes the error LevelDB left in `err` (and frees it), if any.
pub unsafe fn take_error(err: *mut c_char) -> Option<String> {
    if err.is_null() {
        return None;
    }
    let message = std::ffi::CStr::from_ptr(err).to_string_lossy().into_owned();
    leveldb_free(err as *mut libc::c_void);
    Some(message)
}
