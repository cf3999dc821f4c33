//! `shmring.Ring`: create or open a named ring, make its producer and consumers, inspect it.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use ring_core::{DeliveryClass, Memory as _};
use ring_os::raw::Mapping;

mod inspect;

pub(crate) use inspect::group_state;

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
    /// The rendezvous serving a memfd ring's descriptor (`Ring.memfd(serve=...)`).
    server: Option<Server>,
}

/// What serves a memfd ring's descriptor (nothing on Windows: no descriptor passing there).
#[cfg(unix)]
type Server = ring_os::raw::rendezvous::Server;
/// What serves a memfd ring's descriptor (nothing on Windows: no descriptor passing there).
#[cfg(windows)]
type Server = ();

/// The error of a descriptor-passing call on Windows.
#[cfg(windows)]
fn unix_only(what: &str) -> PyErr {
    pyo3::exceptions::PyNotImplementedError::new_err(format!(
        "{what} is Unix-only (descriptor passing); share a named ring instead"
    ))
}

impl Ring {
    fn wrap(ring: ring_os::Ring, name: String, server: Option<Server>) -> Self {
        Self {
            mapping: Arc::clone(ring.mapping()),
            inner: Some(ring),
            name,
            server,
        }
    }

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

/// A builder with the geometry arguments applied.
fn geometry(
    b: ring_os::RingBuilder,
    (slots, slot_size, consumers, pin_only): (u64, u64, u64, bool),
    (arena, max_live): (u64, u64),
) -> PyResult<ring_os::RingBuilder> {
    let mut b = b
        .slots(geometry_arg("slots", slots)?)
        .slot_size(geometry_arg("slot_size", slot_size)?)
        .consumers(geometry_arg("consumers", consumers)?)
        .pin_only(pin_only);
    if arena > 0 {
        let live = match geometry_arg("max_live", max_live)? {
            0 => ring_core::arena::DEFAULT_MAX_LIVE,
            n => n,
        };
        b = b.allocator(arena, live);
    }
    Ok(b)
}

/// A builder made never-stall for `max_pins` pins (`None`: left ordinary).
fn never_stall_arg(
    b: ring_os::RingBuilder,
    max_pins: Option<u64>,
) -> PyResult<ring_os::RingBuilder> {
    Ok(match max_pins {
        Some(n) => b.never_stall(geometry_arg("never_stall", n)?),
        None => b,
    })
}

/// A u32 geometry argument, refusing what does not fit.
fn geometry_arg(what: &str, v: u64) -> PyResult<u32> {
    u32::try_from(v).map_err(|_| PyValueError::new_err(format!("{what}={v} is too large")))
}

/// The descriptor-passing constructors (Unix only).
#[cfg(unix)]
impl Ring {
    fn from_fd_unix(fd: i32) -> PyResult<Self> {
        if fd < 0 {
            return Err(PyValueError::new_err("fd must be a file descriptor >= 0"));
        }
        // SAFETY: the borrow is used for one `dup` only; a number that is not an open
        // descriptor makes the dup fail with EBADF (reported below), nothing else reads it.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let owned = borrowed
            .try_clone_to_owned()
            .map_err(|e| PyValueError::new_err(format!("fd {fd}: {e}")))?;
        let ring = ring_os::Ring::from_fd(owned).map_err(os_err)?;
        Ok(Self::wrap(ring, String::new(), None))
    }

    fn connect_unix(py: Python<'_>, name: &str, timeout: f64) -> PyResult<Self> {
        let seg = ring_os::raw::SegmentName::new(name).map_err(os_err)?;
        let place = ring_os::raw::rendezvous::Rendezvous::new(
            &seg,
            ring_os::raw::rendezvous::SocketPlace::Abstract,
        );
        let end = deadline(Some(timeout))?;
        let found = sliced(py, end, &mut (), |(), slice| match place.connect(slice) {
            Ok(m) => Ok(Some(m)),
            Err(ring_os::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(crate::errors::os(e)),
        })?;
        let Some(mapping) = found else {
            return Err(crate::errors::os(ring_os::Error::NotFound {
                what: format!("a memfd ring served as {name:?}"),
            })
            .into());
        };
        // The front door's handle is made from a descriptor: duplicate the received one (a
        // second mapping of the same memfd; the first goes away with `mapping`).
        let fd = mapping
            .segment()
            .fd()
            .try_clone_to_owned()
            .map_err(|e| PyValueError::new_err(format!("dup: {e}")))?;
        drop(mapping);
        let ring = ring_os::Ring::from_fd(fd).map_err(os_err)?;
        Ok(Self::wrap(ring, name.to_owned(), None))
    }
}

#[pymethods]
impl Ring {
    /// Creates the named ring (raises `AlreadyExists` if the name is taken).
    /// `arena` > 0 adds an in-segment allocator of that many bytes (`max_live` allocations at
    /// most; 0: ring-core's default), which the queue uses for payloads larger than a slot.
    /// `history` (0 to `slots`) is the history for late joiners: every gating or skip
    /// consumer that registers starts up to that many messages back, as far as the ring still
    /// holds them (a latest consumer starts at the newest message present anyway).
    /// `never_stall` (an int: the most messages latest and skip consumers pin at once, all
    /// together; None: an ordinary ring) makes a never-stall ring: the producer writes each
    /// message into a slot nobody pins, so those pins never make it wait (gating consumers
    /// and groups still hold it back). It needs `slots >= never_stall + 2`; fewer raise
    /// `InvalidConfig`.
    #[staticmethod]
    #[pyo3(signature = (name, *, slots = 8, slot_size = 65536, consumers = 8, pin_only = false, keep_name = false, arena = 0, max_live = 0, history = 0, never_stall = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "keyword arguments of a Python constructor"
    )]
    fn create(
        name: &str,
        slots: u64,
        slot_size: u64,
        consumers: u64,
        pin_only: bool,
        keep_name: bool,
        arena: u64,
        max_live: u64,
        history: u64,
        never_stall: Option<u64>,
    ) -> PyResult<Self> {
        let builder = geometry(
            ring_os::Ring::builder(name),
            (slots, slot_size, consumers, pin_only),
            (arena, max_live),
        )?
        .history(geometry_arg("history", history)?);
        let builder = never_stall_arg(builder, never_stall)?;
        let ring = builder.keep_name(keep_name).create().map_err(os_err)?;
        Ok(Self::wrap(ring, name.to_owned(), None))
    }

    /// Creates a ring in a new sealed memfd: no name in `/dev/shm`, freed by the kernel with
    /// its last descriptor or mapping, never truncated by a peer. Share it by passing
    /// `fileno()` to another process (`Ring.from_fd`), or with `serve="name"`: a background
    /// thread then hands the descriptor to every process of this user that calls
    /// `Ring.connect("name")` (an abstract Unix socket; ring-os's rendezvous), until this
    /// handle is closed. `never_stall` as in `Ring.create`.
    #[staticmethod]
    #[pyo3(signature = (*, slots = 8, slot_size = 65536, consumers = 8, pin_only = false, arena = 0, max_live = 0, serve = None, never_stall = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "keyword arguments of a Python constructor"
    )]
    fn memfd(
        slots: u64,
        slot_size: u64,
        consumers: u64,
        pin_only: bool,
        arena: u64,
        max_live: u64,
        serve: Option<&str>,
        never_stall: Option<u64>,
    ) -> PyResult<Self> {
        let builder = geometry(
            ring_os::Ring::memfd(),
            (slots, slot_size, consumers, pin_only),
            (arena, max_live),
        )?;
        let builder = never_stall_arg(builder, never_stall)?;
        let ring = builder.create().map_err(os_err)?;
        #[cfg(windows)]
        let server: Option<Server> = match serve {
            Some(_) => return Err(unix_only("Ring.memfd(serve=...)")),
            None => None,
        };
        #[cfg(unix)]
        let server = match serve {
            Some(name) => {
                let seg = ring_os::raw::SegmentName::new(name).map_err(os_err)?;
                let place = ring_os::raw::rendezvous::Rendezvous::new(
                    &seg,
                    ring_os::raw::rendezvous::SocketPlace::Abstract,
                );
                Some(place.serve(ring.mapping()).map_err(os_err)?)
            }
            None => None,
        };
        Ok(Self::wrap(ring, serve.unwrap_or("").to_owned(), server))
    }

    /// Opens the memfd ring behind descriptor `fd` (which is duplicated: the caller keeps and
    /// closes its own). Its seals, size and header are checked.
    #[staticmethod]
    fn from_fd(fd: i32) -> PyResult<Self> {
        #[cfg(unix)]
        let ring = Self::from_fd_unix(fd);
        #[cfg(windows)]
        let ring = Err(unix_only(&format!("Ring.from_fd({fd})")));
        ring
    }

    /// Connects to the memfd ring served as `name` (`Ring.memfd(serve=name)`) and maps it,
    /// waiting up to `timeout` seconds for the server. Raises `NotFound` when nobody serves it,
    /// `PermissionDenied` when the server runs as another user.
    #[staticmethod]
    #[pyo3(signature = (name, *, timeout = 5.0))]
    fn connect(py: Python<'_>, name: &str, timeout: f64) -> PyResult<Self> {
        #[cfg(unix)]
        let ring = Self::connect_unix(py, name, timeout);
        #[cfg(windows)]
        let ring = {
            let _ = py;
            Err(unix_only(&format!(
                "Ring.connect({name:?}, timeout={timeout})"
            )))
        };
        ring
    }

    /// The ring's descriptor (a memfd or the named segment's file), for `Ring.from_fd` in
    /// another process (`os.dup`, `socket.send_fds`, `subprocess(pass_fds=...)`); owned by
    /// this handle.
    fn fileno(&self) -> PyResult<i32> {
        #[cfg(unix)]
        let fd = {
            use std::os::fd::AsRawFd as _;
            Ok(self.handle()?.fd().as_raw_fd())
        };
        #[cfg(windows)]
        let fd = Err(unix_only("Ring.fileno()"));
        fd
    }

    /// `"named"` or `"memfd"` (or `"file"`).
    #[getter]
    fn kind(&self) -> &'static str {
        match self.mapping.segment().kind() {
            ring_os::raw::SegmentKind::Memfd => "memfd",
            ring_os::raw::SegmentKind::File(_) => "file",
            _ => "named",
        }
    }

    /// Bytes of the allocator's arena (0: none).
    #[getter]
    fn arena(&self) -> PyResult<u64> {
        match crate::queue::Arena::attach(&self.mapping).map_err(PyErr::from)? {
            Some(a) => Ok(a.alloc.arena_bytes()),
            None => Ok(0),
        }
    }

    /// Opens an existing named ring, waiting up to `timeout` seconds for it to appear.
    #[staticmethod]
    #[pyo3(signature = (name, *, timeout = 5.0))]
    fn open(py: Python<'_>, name: &str, timeout: f64) -> PyResult<Self> {
        // The deadline is checked here; each slice opens with a zero wait, so Ctrl-C works.
        let end = deadline(Some(timeout))?;
        let found = sliced(
            py,
            end,
            &mut (),
            |(), slice| match ring_os::Ring::builder(name).open_timeout(slice).open() {
                Ok(r) => Ok(Some(r)),
                Err(ring_os::Error::NotFound { .. }) => {
                    std::thread::sleep(slice.min(crate::wait::SLICE / 5));
                    Ok(None)
                }
                Err(e) => Err(crate::errors::os(e)),
            },
        )?;
        let ring = match found {
            Some(r) => r,
            None => ring_os::Ring::builder(name)
                .open_timeout(core::time::Duration::ZERO)
                .open()
                .map_err(os_err)?,
        };
        Ok(Self::wrap(ring, name.to_owned(), None))
    }

    /// Becomes the ring's one producer (raises `Busy` while a live producer owns it).
    fn producer(&self) -> PyResult<Producer> {
        let publisher = self.handle()?.publisher().map_err(os_err)?;
        Ok(Producer::new(publisher, &self.mapping))
    }

    /// Read-only, zero-copy views of this ring's allocations by handle (`shmring.Allocations`).
    fn allocations(&self) -> PyResult<crate::arena::Allocations> {
        self.handle()?;
        Ok(crate::arena::Allocations::new(&self.mapping)?)
    }

    /// Registers a consumer: `mode` is `"gating"` (loses nothing, holds the producer back),
    /// `"latest"` (only the newest message) or `"skip"` (skips what it lagged behind, counted
    /// in `missed`). `max_pins` (1 to 8, default 4) is how many messages it may keep pinned
    /// at once (`Consumer.pin`; a copying read needs one for its duration). `history` (gating
    /// and skip) starts it up to that many messages back, as far as the ring still holds them
    /// (a gating one is lossless from where it joined, and counts history overwritten before
    /// it read it in `missed`; a latest consumer always starts at the newest message present).
    ///
    /// `group="name"` joins the producer's group of that name (`Producer.create_group`) as a
    /// member instead: members, in any processes, share one cursor, so each message goes to
    /// exactly one of them; a message a member that died was holding goes to another, with
    /// `redelivered` set. A member is gating (`mode` must be `"gating"`, `history` 0). Raises
    /// `NoSuchGroup` until the producer created the group.
    // `max_pins = 4` below is ring-core's default, spelled out for the signature.
    #[pyo3(signature = (mode = "gating", *, max_pins = 4, history = 0, group = None))]
    fn consumer(
        &self,
        mode: &str,
        max_pins: i64,
        history: u64,
        group: Option<&str>,
    ) -> PyResult<Consumer> {
        const _: () = assert!(ring_core::DEFAULT_MAX_HOLDS == 4);
        let class = class_of(mode)?;
        let max = usize::try_from(max_pins)
            .ok()
            .filter(|k| (1..=ring_core::MAX_HOLDS).contains(k))
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "max_pins must be 1 to {} (messages a consumer keeps pinned at once), \
                     not {max_pins}",
                    ring_core::MAX_HOLDS
                ))
            })?;
        let Some(name) = group else {
            let mut sub = self.handle()?.subscriber(class).map_err(os_err)?;
            if history > 0 {
                sub.rewind(history)
                    .map_err(|e| PyValueError::new_err(format!("history={history}: {e}")))?;
            }
            return Consumer::new(sub, class, &self.mapping, max, None);
        };
        if class != DeliveryClass::Gating || history > 0 {
            return Err(PyValueError::new_err(
                "a group member is gating and starts at the group's cursor: mode must be \
                 \"gating\" and history 0 with group=",
            ));
        }
        let sub = self
            .handle()?
            .join_group(name)
            .map_err(|e| group_err(e, name))?;
        Consumer::new(sub, class, &self.mapping, max, Some(name.to_owned()))
    }

    /// `(unread, members)` of group `name`: messages published that no member has taken yet
    /// (plus those waiting for redelivery), and its members whose process is alive; `None`
    /// when the ring has no such group. A snapshot.
    fn _group_state(&self, name: &str) -> Option<(u64, usize)> {
        group_state(&self.mapping, name)
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

    /// Whether the ring is never-stall (`Ring.create(..., never_stall=n)`): latest and skip
    /// consumers' pins never make the producer wait.
    #[getter]
    fn never_stall(&self) -> bool {
        self.mapping.geometry().config().never_stall
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
        inspect::report(self, py)
    }

    /// Closes this handle (the creating handle removes the name; producers and consumers
    /// made from it keep working).
    fn close(&mut self) {
        self.server = None;
        self.inner = None;
    }

    /// Removes the name now (later `open` calls raise `NotFound`).
    fn remove(&mut self) -> PyResult<()> {
        match self.inner.take() {
            Some(r) => {
                self.server = None;
                r.remove().map_err(os_err)
            }
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
            "Ring(name={:?}, slots={}, slot_size={}, consumers={}, pin_only={}{}{})",
            self.name,
            g.slots(),
            g.slot_capacity(),
            g.consumers(),
            if g.config().pin_only { "True" } else { "False" },
            if g.config().never_stall {
                ", never_stall=True"
            } else {
                ""
            },
            if self.inner.is_none() { ", closed" } else { "" }
        )
    }
}

/// A group error with the group's name in its message (`NoSuchGroup`), or the usual class.
pub(crate) fn group_err(e: ring_os::Error, name: &str) -> PyErr {
    match e {
        ring_os::Error::Ring(ring_core::Error::NoSuchGroup) => Fail::new(
            "NoSuchGroup",
            format!(
                "no group {name:?} on this ring: its producer creates it \
                 (Producer.create_group), then consumers join it"
            ),
        )
        .into(),
        e => os_err(e),
    }
}
