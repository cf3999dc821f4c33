//! Benchmarks for the slot ring (work in progress: see the benches issue).
