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
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

type Making = JoinHandle<Result<Warm, RuntimeError>>;

pub(in crate::linux) struct EarlyInit {
    maker: Arc<Maker>,
    disk_mb: u32,
    /// The layers its root is mounted from (none: no root, the start mounts it).
    layers: Option<Vec<std::path::PathBuf>>,
    making: Mutex<Option<Making>>,
}

impl EarlyInit {
    /// Starts making the init, for a sandbox with a `disk_mb` MiB disk (0: none), from
    /// `held` if given (spawned ahead), parked in `root` (an image's name and layer
    /// dirs, top first) if given; `tethered`: its PID 1 ends with this process once
    /// started.
    pub fn begin(
        config: LinuxConfig,
        cgroups: Cgroups,
        (disk_mb, root): (u32, Option<(String, Vec<std::path::PathBuf>)>),
        held: Option<HeldInit>,
        tethered: bool,
    ) -> Result<Self, RuntimeError> {
        let slots = Slots::new(&config.data_dir)?;
        let maker = Arc::new(Maker {
            config,
            cgroups,
            slots,
            net: None,
            tethered,
        });
        let layers = root.as_ref().map(|(_, layers)| layers.clone());
        let shape = Shape {
            disk_mb,
            root,
            ..Shape::default()
        };
        let made = maker.clone();
        let making = std::thread::Builder::new()
            .name("early-init".into())
            .spawn(move || made.make_from(&shape, held))
            .map_err(|e| RuntimeError::AgentStart(format!("starting the early init: {e}")))?;
        Ok(EarlyInit {
            maker,
            disk_mb,
            layers,
            making: Mutex::new(Some(making)),
        })
    }

    /// The init, for a start whose disk is `disk_mb` MiB over `layers`, once made
    /// (waiting for that); `None` when it was made for another size or root (it stays,
    /// for [`EarlyInit::discard`]), taken already, or its make failed (the start is then
    /// cold).
    pub fn take(&self, disk_mb: u32, layers: &[std::path::PathBuf]) -> Option<Warm> {
        if disk_mb != self.disk_mb || self.layers.as_ref().is_some_and(|l| l != layers) {
            return None;
        }
        let making = self.making.lock().ok()?.take()?;
        match making.join() {
            Ok(Ok(warm)) => Some(warm),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the early init was not made; starting cold");
                None
            }
            Err(_) => None,
        }
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
        if let Some(Ok(Ok(warm))) = making.map(JoinHandle::join) {
            self.maker.discard(warm);
        }
    }
}

impl Drop for EarlyInit {
    fn drop(&mut self) {
        self.discard();
    }
}
