//! The Windows backend's own pieces: safe wrappers over the Win32 calls it makes, and the
//! cross-process wait objects behind [`crate::futex`] there. The platform modules that replace
//! their Unix namesakes (`lock`, `segment`, `sigbus`, `stale`) live beside this file.

pub(crate) mod futex;
pub(crate) mod sys;
