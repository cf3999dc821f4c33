//! The Windows backend's safe wrappers over the Win32 calls it makes (owned handles, wide names,
//! the owner-only security descriptor). The Windows modules themselves sit with the jobs they
//! do: `liveness/windows.rs` (role mutexes), `wait/windows.rs` (wait semaphores),
//! `segment/windows/` (sections, the truncation guard's and the cleaner's counterparts).

pub(crate) mod sys;
