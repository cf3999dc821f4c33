//! What `Ring.inspect()` and the queue's `_group_state` read from a ring: the same facts as
//! `ringctl inspect --json`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use ring_core::inspect::{consumer_info, producer_info, total_pins, EntryState};
use ring_core::{Memory as _, OwnerId};
use ring_os::raw::lock::Role;
use ring_os::raw::owner::Liveness;
use ring_os::raw::Mapping;

use super::{mode_of, Ring};

/// `Ring.inspect()`: geometry, producer, consumers, allocator.
pub(super) fn report<'py>(ring: &Ring, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let m = &*ring.mapping;
    let g = m.geometry();
    let seg = m.segment();
    let owner = |role: Role, id: u64| -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(nz) = OwnerId::new(id) else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("id", id)?;
        d.set_item("pid", ring_os::raw::owner::pid_of(nz))?;
        d.set_item("alive", seg.probe(role) == Liveness::Alive)?;
        Ok(Some(d))
    };
    let p = producer_info(m);
    let d = PyDict::new(py);
    d.set_item("name", &ring.name)?;
    d.set_item("mapped_bytes", seg.len())?;
    d.set_item("slots", g.slots())?;
    d.set_item("slot_capacity", g.slot_capacity())?;
    d.set_item("consumer_entries", g.consumers())?;
    d.set_item("pin_only", g.config().pin_only)?;
    d.set_item("never_stall", g.config().never_stall)?;
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
        let class = if c.is_group {
            "group"
        } else {
            c.class.map_or("invalid", mode_of)
        };
        e.set_item("class", class)?;
        // A group's key (FNV-1a of its name) on its record and its members; 0 otherwise.
        e.set_item("group_key", c.group)?;
        e.set_item("claims", c.claims)?;
        // A group's record belongs to the ring, not to a process.
        let id = if c.is_group { 0 } else { c.owner };
        e.set_item("owner", owner(Role::Consumer(i), id)?)?;
        e.set_item("cursor", c.cursor)?;
        e.set_item("lag", p.head.saturating_sub(c.cursor))?;
        e.set_item("pins", c.pins)?;
        e.set_item("received", c.received)?;
        e.set_item("missed", c.missed)?;
        list.append(e)?;
    }
    d.set_item("consumers", list)?;
    let arena = crate::queue::Arena::attach(&ring.mapping).map_err(PyErr::from)?;
    match arena {
        None => d.set_item("allocator", py.None())?,
        Some(a) => d.set_item("allocator", crate::arena::report(py, &a.alloc)?)?,
    }
    Ok(d)
}

/// `(unread, live members)` of group `name` in `mapping`'s ring (see `Ring._group_state`).
pub(crate) fn group_state(mapping: &Mapping, name: &str) -> Option<(u64, usize)> {
    let key = ring_core::group_key(name);
    let head = producer_info(mapping).head;
    let infos: Vec<_> = (0..mapping.geometry().consumers())
        .filter_map(|i| consumer_info(mapping, i))
        .filter(|c| c.group == key && c.state == EntryState::Active)
        .collect();
    let record = infos.iter().find(|c| c.is_group)?;
    let unread = head.saturating_sub(record.cursor) + u64::from(record.claims);
    let seg = mapping.segment();
    let members = infos
        .iter()
        .filter(|c| !c.is_group && seg.probe(Role::Consumer(c.index)) == Liveness::Alive)
        .count();
    Some((unread, members))
}
