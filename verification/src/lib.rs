//! Verification suite for `ring-core` (work in progress: see the verification issue).
