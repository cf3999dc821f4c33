//! Every ring-core call that registers a participant, takes a producer over or reclaims a
//! consumer entry, each backed by the kernel-held role lock (see [`crate::raw::lock`]). They are kept
//! together so the proofs they hand ring-core sit in one place.
//!
//! The rules: a producer holds [`Role::Producer`] before it claims the producer line, so a take-over
//! happens only when that lock could be acquired; a consumer holds [`Role::Consumer`]`(i)` for the
//! entry `i` it registers into; an entry is reclaimed only while the reclaimer holds its lock
//! itself (which it can only get when no live process holds it).

#[cfg(any(windows, ring_portable))]
use crate::liveness::lock::RoleFileRef;
#[cfg(all(unix, not(ring_portable)))]
use std::os::fd::BorrowedFd as RoleFileRef;
use std::sync::Arc;

use ring_core::inspect::consumer_info;
use ring_core::{Consumer, DeliveryClass, Memory, OwnerId, Producer, Reclaimed};

use crate::liveness::lock::{self, Liveness, Role, RoleLock};
use crate::liveness::owner;
use crate::raw::Mapping;
use crate::Error;

/// A memory whose segment file carries the role locks: what the liveness checks probe.
pub trait RoleFile: Memory {
    /// The segment's own descriptor (it holds no lock itself, so probes through it see every
    /// holder, this process included).
    fn role_file(&self) -> RoleFileRef<'_>;

    /// Takes `role`'s lock on a description of its own.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`].
    fn lock_role(&self, role: Role) -> Result<Option<RoleLock>, Error> {
        RoleLock::try_acquire(self.role_file(), role)
    }
}

impl RoleFile for Mapping {
    fn role_file(&self) -> RoleFileRef<'_> {
        #[cfg(all(unix, not(ring_portable)))]
        let file = self.segment().fd();
        #[cfg(any(windows, ring_portable))]
        let file = self.segment().roles();
        file
    }

    fn lock_role(&self, role: Role) -> Result<Option<RoleLock>, Error> {
        self.segment().lock_role(role)
    }
}

impl<T: RoleFile> RoleFile for Arc<T> {
    fn role_file(&self) -> RoleFileRef<'_> {
        (**self).role_file()
    }

    fn lock_role(&self, role: Role) -> Result<Option<RoleLock>, Error> {
        (**self).lock_role(role)
    }
}

/// Whether some process holds `role` on `mem`'s segment.
pub(crate) fn liveness<M: RoleFile + ?Sized>(mem: &M, role: Role) -> Liveness {
    lock::probe(mem.role_file(), role)
}

/// Becomes the ring's producer: takes [`Role::Producer`] first, then claims the producer line,
/// taking it over when a registered producer holds no lock (its process is dead).
///
/// # Errors
///
/// [`Error::ProducerAlive`] when the lock is held; [`Error::Lock`], [`Error::Ring`],
/// [`Error::Io`].
pub(crate) fn become_producer<T: RoleFile>(
    ring: &Arc<T>,
) -> Result<(Producer<Arc<T>>, RoleLock), Error> {
    let me = owner::current()?;
    let registered = || ring_core::inspect::producer_info(&**ring).owner;
    let Some(held) = ring.lock_role(Role::Producer)? else {
        return Err(Error::ProducerAlive {
            owner: registered(),
        });
    };
    // Without OFD locks (non-Linux) a free lock proves nothing: never displace anyone there.
    // SAFETY: we hold Role::Producer, and the caller keeps `held` for the producer's whole
    // life (ShmProducer drops its producer before its lock), so the lock-based verdict that
    // every take-over and reclaim on this memory relies on judges this producer alive.
    let made = match unsafe { Producer::new_unchecked(Arc::clone(ring), me) } {
        Ok(p) => Ok(p),
        Err(ring_core::Error::ProducerExists { owner }) if lock::SUPPORTED => {
            OwnerId::new(owner)
                .ok_or(Error::ProducerAlive { owner })
                .and_then(|dead| {
                    // SAFETY: we hold Role::Producer, so whoever registered `dead` holds no
                    // lock. Every producer on a ring-os mapping holds that lock for its whole
                    // life (`Mapping` is not `OpenJoin`: the only producers on it are made here,
                    // or by `unsafe` code that promised the same), so its process is gone (the
                    // kernel released the lock): it is inside no call and holds no `WriteSlot`.
                    Ok(unsafe { Producer::take_over(Arc::clone(ring), me, dead) }?)
                })
        }
        Err(ring_core::Error::ProducerExists { owner }) => Err(Error::ProducerAlive { owner }),
        Err(e) => Err(e.into()),
    };
    match made {
        Ok(p) => Ok((p, held)),
        // Given up: let the lock go now (a child forked meanwhile must not keep it).
        Err(e) => {
            held.release();
            Err(e)
        }
    }
}

/// What a registration joins as: a lone consumer of a class, or a member of a named group.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Join<'a> {
    Class(DeliveryClass),
    Group(&'a str),
}

/// How often registration retries when another registrant or a reclaimer holds the lock of the
/// entry it wants.
const REGISTER_ATTEMPTS: usize = 200;

/// Registers a consumer of `class`, holding [`Role::Consumer`]`(i)` for its entry `i`: it locks
/// a free-looking entry first, then registers into exactly that entry (`Consumer::new_at`), so
/// a reclaimer (which must take the same lock) never touches an entry being registered.
///
/// # Errors
///
/// [`Error::Ring`] (`ConsumerTableFull`), [`Error::Lock`], [`Error::Io`], [`Error::TimedOut`]
/// when the entries' locks stayed busy.
pub(crate) fn register_consumer<T: RoleFile>(
    ring: &Arc<T>,
    join: Join<'_>,
) -> Result<(Consumer<Arc<T>>, RoleLock), Error> {
    let me = owner::current()?;
    let delay = join_delay();
    let n = ring.geometry().consumers();
    for _ in 0..REGISTER_ATTEMPTS {
        let mut any_free = false;
        for index in 0..n {
            if consumer_info(&**ring, index).is_none_or(|e| e.owner != 0) {
                continue;
            }
            any_free = true;
            let Some(held) = ring.lock_role(Role::Consumer(index))? else {
                continue; // A registrant or a reclaimer holds it right now.
            };
            let hook = || {
                if let Some(d) = delay {
                    std::thread::sleep(d);
                }
            };
            // SAFETY: we hold entry `index`'s lock, and the caller keeps `held` until after the
            // consumer left the entry (ShmConsumer drops its consumer first), so no reclaim of
            // this entry runs while the consumer lives.
            let joined = unsafe {
                match join {
                    Join::Class(class) => {
                        Consumer::new_at_with_hook(Arc::clone(ring), index, class, me, hook)
                    }
                    Join::Group(name) => {
                        Consumer::join_group_at_unchecked(Arc::clone(ring), index, name, me)
                    }
                }
            };
            match joined {
                Ok(consumer) => return Ok((consumer, held)),
                // Taken between our look and our lock (by a peer without ring-os's locks, or a
                // producer sweeping its bits): let the lock go now (a child forked meanwhile
                // must not keep it) and try the next entry.
                Err((_, ring_core::Error::EntryBusy { .. })) => held.release(),
                Err((_, e)) => {
                    held.release();
                    return Err(e.into());
                }
            }
        }
        if !any_free {
            return Err(ring_core::Error::ConsumerTableFull {
                capacity: ring.geometry().config().consumers,
            }
            .into());
        }
        std::thread::sleep(core::time::Duration::from_millis(1));
    }
    Err(Error::TimedOut)
}

/// Reclaims consumer entry `index` if no process holds its lock: takes the lock itself, so
/// nobody can register into the entry meanwhile, re-reads the owner and reclaims while holding
/// it. `None` when the entry is free, alive or was reclaimed by someone else.
pub(crate) fn reclaim_if_dead<M: RoleFile>(p: &mut Producer<M>, index: usize) -> Option<Reclaimed> {
    if !lock::SUPPORTED {
        return None;
    }
    // Cheap first look: no registered owner, or a held lock, means nothing to do.
    let info = p.consumer_info(index)?;
    OwnerId::new(info.owner)?;
    if liveness(p.memory(), Role::Consumer(index)) == Liveness::Alive {
        return None;
    }
    let held = p.memory().lock_role(Role::Consumer(index)).ok()??;
    let reclaimed = reclaim_held(p, index);
    // Taken only for the reclaim: let it go now (a child forked meanwhile must not keep it, or
    // the entry could not be registered into while that child lives).
    held.release();
    reclaimed
}

/// The reclaim of [`reclaim_if_dead`], while it holds entry `index`'s lock.
fn reclaim_held<M: RoleFile>(p: &mut Producer<M>, index: usize) -> Option<Reclaimed> {
    // An entry is held by its owner word (ring-core claims entries with an owner CAS), so a
    // consumer that died at any point of its registration is found here by its owner id.
    let owner = OwnerId::new(p.consumer_info(index)?.owner)?;
    // SAFETY: our caller holds the entry's lock, which the kernel released when its owner died:
    // a live consumer on a ring-os mapping holds it for its whole life (`Mapping` is not
    // `OpenJoin`, so the only consumers on it are registered under that lock, or by `unsafe`
    // code that promised the same): the owner is inside no call and holds no `Pinned`.
    unsafe { p.reclaim(index, owner) }
        .ok()
        .filter(|r| r.was_registered)
}

/// Test hook: `SHMRING_TEST_JOIN_DELAY_MS` makes every registration pause that long between
/// becoming ACTIVE and fixing its start point — the window a preemption opens. Tests set it to
/// show that a publisher waiting for subscribers loses nothing to a slow registration.
pub(crate) fn join_delay() -> Option<core::time::Duration> {
    static DELAY: std::sync::OnceLock<Option<core::time::Duration>> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| {
        std::env::var("SHMRING_TEST_JOIN_DELAY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(core::time::Duration::from_millis)
    })
}
