//! OS shared-memory backend for `ring-core` (work in progress: see the ring-os issue).
