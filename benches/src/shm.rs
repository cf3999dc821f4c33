//! Shared mappings between the parent and its children: a file in the run directory (on
//! `/dev/shm` where it exists), mapped with `memmap2`.

use crate::BenchError;
use memmap2::MmapMut;
use std::fs::OpenOptions;
use std::path::Path;

/// Creates `path` (which must not exist) with `len` zeroed bytes, and maps it shared.
pub fn create(path: &Path, len: usize) -> Result<MmapMut, BenchError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| BenchError::io(format!("create {}", path.display()), e))?;
    file.set_len(len as u64)
        .map_err(|e| BenchError::io(format!("size {}", path.display()), e))?;
    map(&file, path)
}

/// Opens and maps an existing mapping file created by [`create`].
pub fn open(path: &Path) -> Result<MmapMut, BenchError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| BenchError::io(format!("open {}", path.display()), e))?;
    map(&file, path)
}

fn map(file: &std::fs::File, path: &Path) -> Result<MmapMut, BenchError> {
    // SAFETY: the file lives in the harness's private run directory; only the parent and its
    // children map it, nobody truncates it while mapped (it is removed, not shrunk, at the end),
    // and all concurrent access to the bytes goes through atomics or the ring's protocol.
    let mut map = unsafe { MmapMut::map_mut(file) }
        .map_err(|e| BenchError::io(format!("map {}", path.display()), e))?;
    // Fault every page in now, so that no measured iteration pays for it.
    let len = map.len();
    for off in (0..len).step_by(4096) {
        // SAFETY: `off < len`, so the pointer is inside the mapping; a volatile read of one byte
        // is the cheapest way to fault the page without writing.
        let _ = unsafe { std::ptr::read_volatile(map.as_mut_ptr().add(off)) };
    }
    Ok(map)
}
