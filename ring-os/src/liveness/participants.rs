//! The roles a ring's header records (creator, producer, registered consumers), each with the
//! verdict of its role lock: what `ringctl inspect` and `list` show.

use ring_core::Memory;

use crate::liveness::lock::{Liveness, Role};
use crate::segment::Segment;

/// One role recorded in a ring's header, and what its lock says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Participant {
    /// The role.
    pub role: Role,
    /// The owner id recorded for it (diagnostic: pid and start-time hash; see
    /// [`crate::raw::owner`]).
    pub owner: u64,
    /// Whether its role lock is held.
    pub liveness: Liveness,
}

/// Every role `mem`'s header records, each with the verdict of its lock on `seg`.
pub(crate) fn participants<M: Memory + ?Sized>(mem: &M, seg: &Segment) -> Vec<Participant> {
    roles_of(mem)
        .into_iter()
        .map(|(role, owner)| Participant {
            role,
            owner,
            liveness: seg.probe(role),
        })
        .collect()
}

/// The roles a validated segment records, with their owner ids: the creator, the producer (when
/// registered) and every consumer entry that is not free.
pub(crate) fn roles_of<M: Memory + ?Sized>(mem: &M) -> Vec<(Role, u64)> {
    use ring_core::inspect::{consumer_info, producer_info, EntryState};
    // Relaxed: an identity to show, not a synchronisation point.
    let creator = mem
        .header()
        .creator
        .load(core::sync::atomic::Ordering::Relaxed);
    let mut roles = vec![(Role::Creator, creator)];
    let producer = producer_info(mem).owner;
    if producer != 0 {
        roles.push((Role::Producer, producer));
    }
    for i in 0..mem.geometry().consumers() {
        if let Some(info) = consumer_info(mem, i) {
            if info.state != EntryState::Free || info.owner != 0 {
                roles.push((Role::Consumer(i), info.owner));
            }
        }
    }
    roles
}
