//! CUDA device-memory backend for `ring-core` (work in progress: see the ring-cuda issue).
