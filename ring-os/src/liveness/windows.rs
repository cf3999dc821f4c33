//! Kernel-vouched liveness on Windows: one named mutex per role.
//!
//! Each participant (the creator, the producer, each consumer entry) owns a named mutex
//! `Local\<key>.role.<role>` for its role, where `<key>` names the ring (see
//! [`Roles`]). When the owning thread ends — the process exits, crashes or is terminated
//! (`TerminateProcess`) — the kernel marks the mutex *abandoned*: the next wait on it succeeds
//! with `WAIT_ABANDONED`. So "the mutex could be taken" proves "no process holds that role", with
//! no pid guesswork, exactly as a free OFD byte does on Linux (`docs/OS.md`, liveness).
//!
//! Windows mutexes belong to a *thread*, and are recursive for it. So that a role is neither
//! released when the thread that registered it ends nor seen as free by a probe from the same
//! thread, every [`RoleLock`] of the process is owned by one holder thread that lives as long as
//! the process; acquire and release are requests to it. A probe, made on the caller's thread,
//! takes the mutex with a zero timeout and releases it at once: success (or abandonment) means
//! free; a timeout means held; any error means alive.
//!
//! A mutex exists only while some process holds a handle to it; ring-os keeps one open per role
//! it has probed or locked, for the life of the segment.

use std::collections::{BTreeSet, HashMap};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use windows_sys::Win32::Foundation::{WAIT_ABANDONED, WAIT_OBJECT_0, WAIT_TIMEOUT};
use windows_sys::Win32::System::Threading::{CreateMutexW, ReleaseMutex, WaitForSingleObject};

use crate::windows::sys::{self, Handle, OwnerOnly};
use crate::Error;

pub use crate::liveness::role::{Liveness, Role};

/// Windows has kernel-vouched role locks (abandoned mutexes): reclaim and take-over work.
pub const SUPPORTED: bool = true;

/// How long an acquire waits for a mutex that a probe (which holds it for a few instructions)
/// may have taken, before it reports the role held.
const ACQUIRE_WAIT_MS: u32 = 5;

/// What a role's mutex says right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Nobody owns it.
    Free,
    /// Its owner's thread ended without releasing it (a dead process): free, and the kernel
    /// says so explicitly.
    Abandoned,
    /// A live thread (of this or another process) owns it.
    Held,
}

/// The role mutexes of one ring, named after its key (a segment's name, or the file id of a file
/// segment, or a unique id for an anonymous one).
#[derive(Debug)]
pub struct Roles {
    /// The objects' common name prefix (without `Local\`).
    key: String,
    /// One open handle per role probed so far (keeps the named mutex alive while we use it).
    probes: Mutex<HashMap<Role, Handle>>,
}

/// What [`RoleFile::role_file`](crate::raw::RoleFile::role_file) hands out on Windows.
pub type RoleFileRef<'a> = &'a Roles;

impl Roles {
    /// The role mutexes of the ring keyed `key`.
    #[must_use]
    pub fn new(key: String) -> Self {
        Self {
            key,
            probes: Mutex::new(HashMap::new()),
        }
    }

    /// The ring's key.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The object name of `role`'s mutex.
    fn name(&self, role: Role) -> Vec<u16> {
        let what = match role {
            Role::Creator => "role.creator".to_owned(),
            Role::Producer => "role.producer".to_owned(),
            Role::Consumer(i) => format!("role.c{i}"),
        };
        sys::object_name(&self.key, &what)
    }

    /// Opens (or creates, owner-only, unowned) `role`'s mutex.
    fn open(&self, role: Role) -> std::io::Result<Handle> {
        let name = self.name(role);
        let sd = OwnerOnly::get()?;
        let attrs = sd.attributes();
        // SAFETY: `attrs` and `name` (NUL-terminated) live across the call; not initially
        // owned, so creating it takes nothing.
        let raw = unsafe { CreateMutexW(&raw const attrs, 0, name.as_ptr()) };
        Handle::new(raw).ok_or_else(sys::last_error)
    }

    /// What `role`'s mutex says, seen from the calling thread (never the holder thread).
    ///
    /// # Errors
    ///
    /// The Win32 error when the mutex cannot be opened or waited on.
    pub fn state(&self, role: Role) -> std::io::Result<State> {
        let mut probes = self
            .probes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let h = match probes.entry(role) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(self.open(role)?),
        }
        .raw();
        // SAFETY: `h` is an open mutex handle (kept in `probes`, which we lock).
        let r = unsafe { WaitForSingleObject(h, 0) };
        let state = match r {
            WAIT_OBJECT_0 => State::Free,
            WAIT_ABANDONED => State::Abandoned,
            WAIT_TIMEOUT => return Ok(State::Held),
            _ => return Err(sys::last_error()),
        };
        // We own it now (this thread): give it back at once.
        // SAFETY: this thread owns the mutex (the wait above succeeded).
        unsafe { ReleaseMutex(h) };
        Ok(state)
    }
}

/// A held role mutex, owned by the process's holder thread. Dropping it releases the role; so
/// does the kernel (abandonment) when the process dies.
///
/// # Examples
///
/// ```
/// use ring_os::raw::lock::{probe, Liveness, Role, RoleLock, Roles};
/// let roles = Roles::new(format!("shmring-doc.{}", std::process::id()));
/// let held = RoleLock::try_acquire(&roles, Role::Consumer(3))?.expect("free");
/// assert_eq!(probe(&roles, Role::Consumer(3)), Liveness::Alive);
/// assert!(RoleLock::try_acquire(&roles, Role::Consumer(3))?.is_none());
/// drop(held);
/// assert_eq!(probe(&roles, Role::Consumer(3)), Liveness::Dead);
/// # Ok::<(), ring_os::Error>(())
/// ```
#[derive(Debug)]
pub struct RoleLock {
    /// The mutex handle, owned by the holder thread while this lives.
    handle: Option<Handle>,
    /// The mutex's name, in [`HELD`] while this lives.
    name: Vec<u16>,
    /// The role it vouches for.
    role: Role,
}

impl RoleLock {
    /// Takes `role`'s mutex; `Ok(None)` when a live thread (of this or another process) owns it.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] when the mutex cannot be created or waited on.
    pub fn try_acquire(roles: &Roles, role: Role) -> Result<Option<Self>, Error> {
        let lock_err = |source| Error::Lock {
            role: role.to_string(),
            source,
        };
        let name = roles.name(role);
        // The holder thread owns every role of this process, and a mutex is recursive for its
        // owner: so a second lock of a role this process holds is refused here, not by the
        // kernel. The set stays locked until the acquire is answered, so two threads of this
        // process cannot both take a role.
        let mut held = HELD
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.contains(&name) {
            return Ok(None);
        }
        let handle = roles.open(role).map_err(lock_err)?;
        if holder::acquire(&handle).map_err(lock_err)? {
            held.insert(name.clone());
            Ok(Some(Self {
                handle: Some(handle),
                name,
                role,
            }))
        } else {
            Ok(None)
        }
    }

    /// The role this lock vouches for.
    #[must_use]
    pub fn role(&self) -> Role {
        self.role
    }

    /// Lets the role go now. The same as a drop here: a mutex is released by its holder thread,
    /// and no child inherits it (the Unix backends unlock a momentary lock before it closes).
    pub(crate) fn release(self) {
        drop(self);
    }
}

impl Drop for RoleLock {
    fn drop(&mut self) {
        let mut held = HELD
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(h) = self.handle.take() {
            holder::release(h);
        }
        held.remove(&self.name);
    }
}

/// The names of the role mutexes this process holds (through the holder thread).
static HELD: Mutex<BTreeSet<Vec<u16>>> = Mutex::new(BTreeSet::new());

/// Whether some process holds `role` of `roles`. [`Liveness::Dead`] only when the mutex could be
/// taken (free or abandoned); any error is [`Liveness::Alive`].
#[must_use]
pub fn probe(roles: &Roles, role: Role) -> Liveness {
    match roles.state(role) {
        Ok(State::Free | State::Abandoned) => Liveness::Dead,
        Ok(State::Held) | Err(_) => Liveness::Alive,
    }
}

/// The thread that owns every role mutex this process holds.
mod holder {
    use super::{
        mpsc, sys, Handle, Mutex, OnceLock, ReleaseMutex, WaitForSingleObject, ACQUIRE_WAIT_MS,
        WAIT_ABANDONED, WAIT_OBJECT_0, WAIT_TIMEOUT,
    };

    /// A request to the holder thread: the raw handle (as an integer, to cross threads) and
    /// where to answer.
    enum Request {
        /// Wait for the mutex briefly; answer whether it is now owned.
        Acquire(usize, mpsc::Sender<std::io::Result<bool>>),
        /// Release the mutex (owned by the holder), then answer.
        Release(usize, mpsc::Sender<()>),
    }

    /// The channel to the holder thread, started on first use.
    fn requests() -> std::io::Result<mpsc::Sender<Request>> {
        static TX: OnceLock<Option<Mutex<mpsc::Sender<Request>>>> = OnceLock::new();
        let tx = TX.get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Request>();
            std::thread::Builder::new()
                .name("ring-os role locks".into())
                .spawn(move || serve(&rx))
                .ok()
                .map(|_| Mutex::new(tx))
        });
        tx.as_ref()
            .map(|m| {
                m.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone()
            })
            .ok_or_else(|| std::io::Error::other("cannot start the role-lock thread"))
    }

    /// The holder thread's loop: it never ends while the process runs (the sender is static).
    fn serve(rx: &mpsc::Receiver<Request>) {
        while let Ok(req) = rx.recv() {
            match req {
                Request::Acquire(h, reply) => {
                    let h = h as windows_sys::Win32::Foundation::HANDLE;
                    // SAFETY: the requester keeps the handle open until we answer.
                    let r = unsafe { WaitForSingleObject(h, ACQUIRE_WAIT_MS) };
                    let answer = match r {
                        WAIT_OBJECT_0 | WAIT_ABANDONED => Ok(true),
                        WAIT_TIMEOUT => Ok(false),
                        _ => Err(sys::last_error()),
                    };
                    let _ = reply.send(answer);
                }
                Request::Release(h, reply) => {
                    // SAFETY: this thread owns the mutex (it acquired it for the RoleLock being
                    // dropped); the requester keeps the handle open until we answer.
                    unsafe { ReleaseMutex(h as windows_sys::Win32::Foundation::HANDLE) };
                    let _ = reply.send(());
                }
            }
        }
    }

    /// Has the holder thread take `h`: true when it now owns it.
    pub(super) fn acquire(h: &Handle) -> std::io::Result<bool> {
        let (tx, rx) = mpsc::channel();
        requests()?
            .send(Request::Acquire(h.raw() as usize, tx))
            .map_err(|_| std::io::Error::other("the role-lock thread is gone"))?;
        rx.recv()
            .map_err(|_| std::io::Error::other("the role-lock thread is gone"))?
    }

    /// Has the holder thread release `h`, then closes it.
    pub(super) fn release(h: Handle) {
        let (tx, rx) = mpsc::channel();
        if let Ok(req) = requests() {
            if req.send(Request::Release(h.raw() as usize, tx)).is_ok() {
                let _ = rx.recv();
            }
        }
        drop(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles(tag: &str) -> Roles {
        Roles::new(format!("shmring-test-lock.{}.{tag}", std::process::id()))
    }

    #[test]
    fn a_held_role_is_alive_to_every_thread_and_refused_to_a_second_holder() {
        let r = roles("held");
        assert_eq!(probe(&r, Role::Producer), Liveness::Dead);
        let held = RoleLock::try_acquire(&r, Role::Producer).unwrap().unwrap();
        assert_eq!(probe(&r, Role::Producer), Liveness::Alive);
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(probe(&r, Role::Producer), Liveness::Alive));
        });
        assert!(RoleLock::try_acquire(&r, Role::Producer).unwrap().is_none());
        // Other roles are independent.
        assert_eq!(probe(&r, Role::Consumer(0)), Liveness::Dead);
        drop(held);
        assert_eq!(probe(&r, Role::Producer), Liveness::Dead);
        assert!(RoleLock::try_acquire(&r, Role::Producer).unwrap().is_some());
    }

    #[test]
    fn a_lock_taken_on_a_thread_that_ends_stays_held() {
        // Windows mutexes belong to threads: without the holder thread this role would be
        // abandoned (and look dead) the moment the registering thread returned.
        let r = roles("thread");
        let held = std::thread::scope(|s| {
            s.spawn(|| {
                RoleLock::try_acquire(&r, Role::Consumer(1))
                    .unwrap()
                    .unwrap()
            })
            .join()
            .unwrap()
        });
        assert_eq!(r.state(Role::Consumer(1)).unwrap(), State::Held);
        drop(held);
        assert_eq!(r.state(Role::Consumer(1)).unwrap(), State::Free);
    }
}
