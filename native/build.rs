// LevelDB is the system's (Debian: libleveldb-dev), the library plyvel wraps, with snappy: a
// store written by either reads back through the other.
fn main() {
    println!("cargo:rustc-link-lib=dylib=leveldb");
    println!("cargo:rerun-if-changed=build.rs");
}
