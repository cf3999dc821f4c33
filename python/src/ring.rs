//! `shmring.Ring`: create or open a named ring, make its producer and consumers, inspect it.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use ring_core::inspect::{consumer_info, producer_info, total_pins, EntryState};
use ring_core::{DeliveryClass, Memory as _, OwnerId};
use ring_os::lock::Role;
use ring_os::owner::Liveness;
use ring_os::Mapping;

use crate::consumer::Consumer;
use crate::errors::{os_err, Fail};
use crate::producer::Producer;
use crate::wait::{deadline, sliced};

/// A ring in OS shared memory (`/dev/shm/shmring.<name>`).
///
/// The handle that created the ring removes its name when it is closed or garbage-collected
/// (unless `keep_name=True`); producers and consumers made from any handle keep the mapping
/// alive on their own. Segments are never registered with `multiprocessing.resource_tracker`.
#[pyclass(module = "shmring")]
pub(crate) struct Ring {
    inner: Option<ring_os::Ring>,
    mapping: Arc<Mapping>,
    name: String,
}

impl Ring {
    fn handle(&self) -> PyResult<&ring_os::Ring> {
        self.inner
            .as_ref()
            .ok_or_else(|| Fail::new("Closed", "this ring handle is closed").into())
    }
}

/// The delivery class a mode string names.
fn class_of(mode: &str) -> PyResult<DeliveryClass> {
    match mode {
        "gating" => Ok(DeliveryClass::Gating),
        "latest" => Ok(DeliveryClass::LatestOnly),
        "skip" => Ok(DeliveryClass::SkipOnLag),
        other => Err(PyValueError::new_err(format!(
            "mode must be \"gating\", \"latest\" or \"skip\", not {other:?}"
        ))),
    }
}

/// The Python name of a delivery class.
pub(crate) fn mode_of(class: DeliveryClass) -> &'static str {
    match class {
        DeliveryClass::Gating => "gating",
        DeliveryClass::LatestOnly => "latest",
        DeliveryClass::SkipOnLag => "skip",
    }
}

/// A u32 geometry argument, refusing what does not fit.
fn geometry_arg(what: &str, v: u64) -> PyResult<u32> {
    u32::try_from(v).map_err(|_| PyValueError::new_err(format!("{what}={v} is too large")))
}

#[pymethods]
impl Ring {
    /// Creates the named ring (raises `AlreadyExists` if the name is taken).
    #[staticmethod]
    #[pyo3(signature = (name, *, slots = 8, slot_size = 65536, consumers = 8, pin_only = false, keep_name = false))]
    fn create(
        name: &str,
        slots: u64,
        slot_size: u64,
        consumers: u64,
        pin_only: bool,
        keep_name: bool,
    ) -> PyResult<Self> {
        let ring = ring_os::Ring::builder(name)
            .slots(geometry_arg("slots", slots)?)
            .slot_size(geometry_arg("slot_size", slot_size)?)
            .consumers(geometry_arg("consumers", consumers)?)
            .pin_only(pin_only)
            .keep_name(keep_name)
            .create()
            .map_err(os_err)?;
        Ok(Self {
            mapping: Arc::clone(ring.mapping()),
            inner: Some(ring),
            name: name.to_owned(),
        })
    }

    /// Opens an existing named ring, waiting up to `timeout` seconds for it to appear.
    #[staticmethod]
    #[pyo3(signature = (name, *, timeout = 5.0))]
    fn open(py: Python<'_>, name: &str, timeout: f64) -> PyResult<Self> {
        // The deadline is checked here; each slice opens with a zero wait, so Ctrl-C works.
        let end = deadline(Some(timeout))?;
        let found = sliced(py, end, |slice| {
            match ring_os::Ring::builder(name).open_timeout(slice).open() {
                Ok(r) => Ok(Some(r)),
                Err(ring_os::Error::NotFound { .. }) => {
                    std::thread::sleep(slice.min(crate::wait::SLICE / 5));
                    Ok(None)
                }
                Err(e) => Err(crate::errors::os(e)),
            }
        })?;
        let ring = match found {
            Some(r) => r,
            None => ring_os::Ring::builder(name)
                .open_timeout(core::time::Duration::ZERO)
                .open()
                .map_err(os_err)?,
        };
        Ok(Self {
            mapping: Arc::clone(ring.mapping()),
            inner: Some(ring),
            name: name.to_owned(),
        })
    }

    /// Becomes the ring's one producer (raises `Busy` while a live producer owns it).
    fn producer(&self) -> PyResult<Producer> {
        let publisher = self.handle()?.publisher().map_err(os_err)?;
        Ok(Producer::new(publisher, &self.mapping))
    }

    /// Registers a consumer: `mode` is `"gating"` (loses nothing, holds the producer back),
    /// `"latest"` (only the newest message) or `"skip"` (skips what it lagged behind, counted
    /// in `missed`).
    #[pyo3(signature = (mode = "gating"))]
    fn consumer(&self, mode: &str) -> PyResult<Consumer> {
        let class = class_of(mode)?;
        let sub = self.handle()?.subscriber(class).map_err(os_err)?;
        Ok(Consumer::new(sub, class))
    }

    /// The ring's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Number of slots.
    #[getter]
    fn slots(&self) -> usize {
        self.mapping.geometry().slots()
    }

    /// Payload bytes per slot.
    #[getter]
    fn slot_size(&self) -> usize {
        self.mapping.geometry().slot_capacity()
    }

    /// Consumer-table entries.
    #[getter]
    fn consumers(&self) -> usize {
        self.mapping.geometry().consumers()
    }

    /// Whether consumers only read what they pin (required for `Producer.claim`).
    #[getter]
    fn pin_only(&self) -> bool {
        self.mapping.geometry().config().pin_only
    }

    /// Whether this handle is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_none()
    }

    /// `(start, end)` addresses of this process's mapping of the ring (for zero-copy checks).
    fn address_range(&self) -> (usize, usize) {
        let seg = self.mapping.segment();
        let start = seg.as_ptr().as_ptr() as usize;
        (start, start + seg.len())
    }

    /// The same facts as `ringctl inspect --json`: geometry, producer, consumers.
    fn inspect<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = &*self.mapping;
        let g = m.geometry();
        let seg = m.segment();
        let owner = |role: Role, id: u64| -> PyResult<Option<Bound<'py, PyDict>>> {
            let Some(nz) = OwnerId::new(id) else {
                return Ok(None);
            };
            let d = PyDict::new(py);
            d.set_item("id", id)?;
            d.set_item("pid", ring_os::owner::pid_of(nz))?;
            d.set_item("alive", seg.probe(role) == Liveness::Alive)?;
            Ok(Some(d))
        };
        let p = producer_info(m);
        let d = PyDict::new(py);
        d.set_item("name", &self.name)?;
        d.set_item("mapped_bytes", seg.len())?;
        d.set_item("slots", g.slots())?;
        d.set_item("slot_capacity", g.slot_capacity())?;
        d.set_item("consumer_entries", g.consumers())?;
        d.set_item("pin_only", g.config().pin_only)?;
        d.set_item("head", p.head)?;
        d.set_item("producer", owner(Role::Producer, p.owner)?)?;
        d.set_item("closed", p.closed)?;
        d.set_item("aborted", p.aborted)?;
        d.set_item("epoch", p.epoch)?;
        d.set_item("writing", p.writing)?;
        d.set_item("total_pins", total_pins(m))?;
        let list = PyList::empty(py);
        for i in 0..g.consumers() {
            let Some(c) = consumer_info(m, i) else {
                continue;
            };
            if c.state == EntryState::Free {
                continue;
            }
            let e = PyDict::new(py);
            e.set_item("index", c.index)?;
            let state = match c.state {
                EntryState::Free => "free".to_owned(),
                EntryState::Joining => "joining".to_owned(),
                EntryState::Active => "active".to_owned(),
                EntryState::Reclaiming => "reclaiming".to_owned(),
                EntryState::Corrupt(v) => format!("corrupt({v})"),
            };
            e.set_item("state", state)?;
            e.set_item("class", c.class.map_or("invalid", mode_of))?;
            e.set_item("owner", owner(Role::Consumer(i), c.owner)?)?;
            e.set_item("cursor", c.cursor)?;
            e.set_item("lag", p.head.saturating_sub(c.cursor))?;
            e.set_item("pins", c.pins)?;
            e.set_item("received", c.received)?;
            e.set_item("missed", c.missed)?;
            list.append(e)?;
        }
        d.set_item("consumers", list)?;
        Ok(d)
    }

    /// Closes this handle (the creating handle removes the name; producers and consumers
    /// made from it keep working).
    fn close(&mut self) {
        self.inner = None;
    }

    /// Removes the name now (later `open` calls raise `NotFound`).
    fn remove(&mut self) -> PyResult<()> {
        match self.inner.take() {
            Some(r) => r.remove().map_err(os_err),
            None => Err(Fail::new("Closed", "this ring handle is closed").into()),
        }
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        let g = self.mapping.geometry();
        format!(
            "Ring(name={:?}, slots={}, slot_size={}, consumers={}, pin_only={}{})",
            self.name,
            g.slots(),
            g.slot_capacity(),
            g.consumers(),
            if g.config().pin_only { "True" } else { "False" },
            if self.inner.is_none() { ", closed" } else { "" }
        )
    }
}
