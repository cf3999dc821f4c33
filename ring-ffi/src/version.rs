//! The library's version as a string. A module of its own, declared last, because cbindgen
//! writes the functions in the order it reads them and the header ends with this one
//! (`shmring_version` and the version constants are in the crate root).

use core::ffi::{c_char, CStr};

/// The library's version as a static string (`"0.1.0"`): never NULL, never freed.
#[no_mangle]
pub extern "C" fn shmring_version_string() -> *const c_char {
    const V: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"?",
        };
    V.as_ptr()
}
