//! One init made at once, in the background, for the single start of a one-shot runtime
//! (`sandboxd run`): its spawn, its first cgroup move (an RCU grace period), its id maps
//! and its disk overlap the opening of the engine and the create's bookkeeping instead
//! of following them. Given the root it will run in (the built-in image's), it goes on
//! as a pool's entry does: root mounted, PID 1 confined and serving, parked (and
//! tethered to the run from its start on, as a cold start's PID 1 is). It is a warm entry (`.warm-<key>` dir, owner mark): a start of
//! the same disk size takes it, waiting for its make if need be; one left untaken is
//! removed by [`EarlyInit::discard`] (also on drop), and one whose process was killed
//! by the next runtime opening the data dir (`sweep_stale`).

use super::entry::{Maker, Warm};
use super::Shape;
use crate::linux::cgroup::Cgroups;
use crate::linux::held_init::HeldInit;
use crate::linux::slots::Slots;
use crate::linux::LinuxConfig;
use crate::RuntimeError;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

type Making = JoinHandle<Result<Warm, RuntimeError>>;

pub(in crate::linux) struct EarlyInit {
    maker: Arc<Maker>,
    disk_mb: u32,
    /// The image and layers its root is mounted from (none: no root, the start mounts
    /// it). The name matters too: whether the host's /usr is bound in goes by it.
    root: Option<(String, Vec<std::path::PathBuf>)>,
    making: Mutex<Option<Making>>,
    /// Its network namespace once its init has one (long before it is parked).
    netns: Arc<Told>,
}

/// A network namespace told by the making thread, waited for by a start.
#[derive(Default)]
struct Told {
    state: Mutex<Telling>,
    changed: Condvar,
}

#[derive(Default)]
enum Telling {
    #[default]
    Waiting,
    Told(OwnedFd),
    /// The make ended without telling one (it failed first).
    Never,
}

/// Tells [`Telling::Never`] when dropped, unless a namespace was told.
struct EndsTelling(Arc<Told>);

impl Drop for EndsTelling {
    fn drop(&mut self) {
        self.0.set(Telling::Never);
    }
}

impl Told {
    fn set(&self, telling: Telling) {
        if let Ok(mut state) = self.state.lock() {
            if matches!(*state, Telling::Waiting) {
                *state = telling;
                self.changed.notify_all();
            }
        }
    }

    /// The namespace once told, handed out once (no descriptor of it is kept here);
    /// `None` once the make ended without one.
    fn take(&self) -> Option<OwnedFd> {
        let mut state = self.state.lock().ok()?;
        while matches!(*state, Telling::Waiting) {
            state = self.changed.wait(state).ok()?;
        }
        match std::mem::replace(&mut *state, Telling::Never) {
            Telling::Told(ns) => Some(ns),
            _ => None,
        }
    }

    /// Drops a namespace told and not handed out (its sandbox is not to be kept alive
    /// by this process's descriptor).
    fn forget(&self) {
        if let Ok(mut state) = self.state.lock() {
            *state = Telling::Never;
            self.changed.notify_all();
        }
    }
}

impl EarlyInit {
    /// Starts making the init, for a sandbox with a `disk_mb` MiB disk (0: none), from
    /// `held` if given (spawned ahead), parked in `root` (an image's name and layer
    /// dirs, top first) if given; `tethered`: its PID 1 ends with this process once
    /// started. Its slot comes from `slots`, the runtime's allocator (already opened:
    /// no second adoption and reclaim of the host's leases on the make's way).
    pub fn begin(
        config: LinuxConfig,
        cgroups: Cgroups,
        slots: Slots,
        (disk_mb, root): (u32, Option<(String, Vec<std::path::PathBuf>)>),
        held: Option<HeldInit>,
        tethered: bool,
    ) -> Result<Self, RuntimeError> {
        let maker = Arc::new(Maker {
            config,
            cgroups,
            slots,
            net: None,
            tethered,
        });
        let shape = Shape {
            disk_mb,
            root: root.clone(),
            ..Shape::default()
        };
        let made = maker.clone();
        let netns = Arc::new(Told::default());
        let told = netns.clone();
        let making = std::thread::Builder::new()
            .name("early-init".into())
            .spawn(move || {
                // Its end (a panic too) tells a waiting start that none will come.
                let ended = EndsTelling(told);
                // Told none (its namespace could not be opened), the start waits for
                // the make's end and links PID 1's namespace then.
                let tell = |ns: Option<OwnedFd>| {
                    if let Some(ns) = ns {
                        ended.0.set(Telling::Told(ns));
                    }
                };
                made.make_telling(&shape, held, Some(&tell))
            })
            .map_err(|e| RuntimeError::AgentStart(format!("starting the early init: {e}")))?;
        Ok(EarlyInit {
            maker,
            disk_mb,
            root,
            making: Mutex::new(Some(making)),
            netns,
        })
    }

    /// Whether a start whose disk is `disk_mb` MiB of image `image` over `layers` would
    /// take it.
    fn fits(&self, disk_mb: u32, image: &str, layers: &[std::path::PathBuf]) -> bool {
        disk_mb == self.disk_mb
            && self
                .root
                .as_ref()
                .is_none_or(|(name, l)| name == image && l == layers)
    }

    /// The init, for the start whose disk is `disk_mb` MiB of `image` over `layers`, in
    /// one step: no other start can have it from then on. `None` when it was made for
    /// another size or root (it stays, for [`EarlyInit::discard`]) or claimed already.
    /// The claim tells its network namespace before the make ends
    /// ([`Claimed::netns`]) and hands the init over once made ([`Claimed::wait`]).
    pub fn claim(
        &self,
        disk_mb: u32,
        image: &str,
        layers: &[std::path::PathBuf],
    ) -> Option<Claimed<'_>> {
        if !self.fits(disk_mb, image, layers) {
            return None;
        }
        let making = self.making.lock().ok()?.take()?;
        Some(Claimed {
            early: self,
            making: Some(making),
        })
    }

    /// Gives a taken init's id slot to sandbox `id`.
    pub fn hand_over_slot(&self, warm: &Warm, id: uuid::Uuid) -> Result<(), RuntimeError> {
        self.maker.slots.hand_over(warm.host_id_base, warm.key, id)
    }

    /// Ends a taken init that will not be used and removes what it made.
    pub fn discard_taken(&self, warm: Warm) {
        self.maker.discard(warm);
    }

    /// Ends the init if no start took it (waiting for its make) and removes what it made.
    pub fn discard(&self) {
        let making = self.making.lock().ok().and_then(|mut m| m.take());
        let made = making.map(JoinHandle::join);
        self.netns.forget();
        if let Some(Ok(Ok(warm))) = made {
            self.maker.discard(warm);
        }
    }
}

impl Drop for EarlyInit {
    fn drop(&mut self) {
        self.discard();
    }
}

/// An early init claimed by a start (see [`EarlyInit::claim`]); dropped unwaited, its
/// init is ended and what it made removed.
pub(in crate::linux) struct Claimed<'a> {
    early: &'a EarlyInit,
    making: Option<Making>,
}

impl Claimed<'_> {
    /// Its init's network namespace once the init has one (before it is parked: the
    /// start's link can be made while the make goes on); `None` when its make failed
    /// first. A make that fails after telling leaves the start cold, in another
    /// namespace it tells too.
    pub fn netns(&self) -> Option<OwnedFd> {
        self.early.netns.take()
    }

    /// The init once made (waiting for that); `None` when its make failed or its init
    /// died meanwhile (removed): the start is then cold.
    pub fn wait(mut self) -> Option<Warm> {
        let made = self.making.take()?.join();
        self.early.netns.forget();
        match made {
            Ok(Ok(mut warm)) => {
                if warm.is_alive() {
                    return Some(warm);
                }
                tracing::warn!(key = %warm.key, "the early init died before its start; starting cold");
                self.early.maker.discard(warm);
                None
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the early init was not made; starting cold");
                None
            }
            Err(_) => None,
        }
    }
}

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        if let Some(making) = self.making.take() {
            let made = making.join();
            self.early.netns.forget();
            if let Ok(Ok(warm)) = made {
                self.early.maker.discard(warm);
            }
        }
    }
}
