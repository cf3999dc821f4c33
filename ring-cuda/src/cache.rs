//! Open-once caches: opening an IPC handle costs milliseconds on a GPU, so each consumer opens
//! each exported buffer (and each peer's event) once and reuses the mapping.

use core::hash::Hash;
use std::collections::HashMap;

use crate::device::Device;
use crate::error::Result;
use crate::handle::{EventId, MappingId};

/// Hit/open counters of a cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that had to open the handle.
    pub opens: u64,
    /// Entries held now.
    pub live: usize,
}

/// A map from a key naming an exported resource (for the ring: exporter, slot, generation) to
/// what opening it produced. Entries must be released through [`OpenCache::drain`] with the
/// device that opened them; anything left over shows in the device's leak report.
#[derive(Debug)]
pub struct OpenCache<K, V> {
    entries: HashMap<K, V>,
    hits: u64,
    opens: u64,
}

/// A cache of opened buffer mappings.
pub type MappingCache<K> = OpenCache<K, MappingId>;
/// A cache of opened interprocess events.
pub type EventCache<K> = OpenCache<K, EventId>;

impl<K: Hash + Eq, V: Copy> Default for OpenCache<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq, V: Copy> OpenCache<K, V> {
    /// An empty cache.
    #[must_use]
    pub fn new() -> Self {
        Self {
            entries: HashMap::new(),
            hits: 0,
            opens: 0,
        }
    }

    /// The cached value for `key`, or the result of `open` (cached on success).
    ///
    /// # Errors
    /// Whatever `open` returns; nothing is cached then.
    pub fn get_or_open(&mut self, key: K, open: impl FnOnce() -> Result<V>) -> Result<V> {
        if let Some(v) = self.entries.get(&key) {
            self.hits += 1;
            return Ok(*v);
        }
        let v = open()?;
        self.opens += 1;
        self.entries.insert(key, v);
        Ok(v)
    }

    /// The cached value, without opening.
    #[must_use]
    pub fn get(&self, key: &K) -> Option<V> {
        self.entries.get(key).copied()
    }

    /// Removes an entry (its value is returned for the caller to close).
    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.entries.remove(key)
    }

    /// Removes every entry matching `pred`, returning their values for the caller to close.
    pub fn remove_where(&mut self, mut pred: impl FnMut(&K) -> bool) -> Vec<V> {
        let mut out = Vec::new();
        self.entries.retain(|k, v| {
            if pred(k) {
                out.push(*v);
                false
            } else {
                true
            }
        });
        out
    }

    /// Empties the cache, returning every value for the caller to close.
    pub fn drain(&mut self) -> Vec<V> {
        self.entries.drain().map(|(_, v)| v).collect()
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits,
            opens: self.opens,
            live: self.entries.len(),
        }
    }
}

impl<K: Hash + Eq> MappingCache<K> {
    /// Closes every cached mapping on `device`; returns the first error after trying them all.
    ///
    /// # Errors
    /// The first close that failed.
    pub fn close_all<D: Device + ?Sized>(&mut self, device: &D) -> Result<()> {
        first_error(self.drain(), |m| device.close(m))
    }
}

impl<K: Hash + Eq> EventCache<K> {
    /// Destroys every cached event on `device`; returns the first error after trying them all.
    ///
    /// # Errors
    /// The first destroy that failed.
    pub fn destroy_all<D: Device + ?Sized>(&mut self, device: &D) -> Result<()> {
        first_error(self.drain(), |e| device.destroy_event(e))
    }
}

/// Runs `f` on every value, even after one failed; returns the first error.
fn first_error<V>(values: Vec<V>, mut f: impl FnMut(V) -> Result<()>) -> Result<()> {
    let mut first = Ok(());
    for v in values {
        let r = f(v);
        if first.is_ok() {
            first = r;
        }
    }
    first
}
