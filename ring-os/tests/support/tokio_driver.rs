//! Runs an `asyncio::Driver` on the current tokio runtime: its io_uring fd in tokio's epoll, the
//! completions reaped (and the futures woken) on the runtime's thread. Shared by the async
//! tests (`tests/async_uring.rs`, `tests/async_ends.rs`) and `examples/async_bench.rs`.

/// Registers `driver`'s fd with the current runtime (call inside one: a task, `block_on`, or
/// under `Runtime::enter`) and spawns the task that dispatches its completions.
///
/// # Errors
/// Registering the fd with tokio's epoll failed.
pub fn drive_on_tokio(driver: ring_os::asyncio::Driver) -> std::io::Result<()> {
    // SAFETY: a driver's fd is the process reactor's io_uring, never closed while the process
    // lives, so it stays open and the same file for the `AsyncFd`'s whole life.
    let fd = unsafe { tokio::io::unix::AsyncFd::register(driver) }.map_err(std::io::Error::from)?;
    tokio::spawn(async move {
        while let Ok(mut ready) = fd.readable().await {
            ready.clear_ready(); // before reaping: a completion after it is a new edge
            ready.get_inner().dispatch();
        }
    });
    Ok(())
}
