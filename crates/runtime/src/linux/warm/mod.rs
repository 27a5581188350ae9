//! Warm inits: a few sandbox inits started ahead of time, each already in a cgroup of
//! its own with its namespaces, its id range mapped and, for the [`Shape`] most starts
//! ask for, its writable disk and the default image's root mounted. A start takes one
//! instead of paying, on its critical path, for the init's exec, the RCU grace period
//! of a first v1 cgroup move (5-10 ms here), the disk's loop mount and the root's
//! mounts. With egress preferred, each entry is also *wired* (`net::wired`): a host
//! side of its own and the veth already in the init's network namespace.
//!
//! Besides the entries of the wanted shape, the pool parks one entry in the root of each
//! of the last few images (other than the wanted one) that starts used on their own (no
//! snapshot layers on top): see [`images`]. Such an entry's layers are pinned against
//! collection like a sandbox's, and it goes once its image no longer resolves to them
//! (`images rm`, or the name now naming other layers).
//!
//! An entry lives in `sandboxes/.warm-<key>/` (renamed to the sandbox's state dir when
//! taken), the cgroup `<parent>/<key>` (renamed to the sandbox's id) and an id slot
//! recorded for `key` (given to the sandbox). Its init waits for `Go` and exits when we
//! close the handshake socket, so a dead server leaves no process behind; the next
//! runtime with a pool removes what such entries left.

mod demand;
mod early;
mod entry;
mod first_command;
mod images;
pub(super) use images::still_stacks;

use super::cgroup::Cgroups;
use super::net::policy::Policy;
use super::net::NetConfig;
use super::slots::Slots;
use super::{refill, LinuxConfig};
use crate::RuntimeError;
use demand::Demand;
pub(super) use early::{Claimed, EarlyInit};
use entry::Maker;
pub(super) use entry::Warm;
pub(super) use entry::{entry_key, slot_base, DIR_PREFIX};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Entries a refill makes at once while starts come (when the pool has none left for
/// them: otherwise it waits for a pause).
const PARALLEL: usize = 2;
/// Entries a refill makes at once while no start has come for [`PAUSE`] (the fill at a
/// server's start, the refill after a burst).
const PARALLEL_QUIET: usize = 4;
/// How long starts must pause before a refill makes entries while some are left.
const PAUSE: Duration = Duration::from_millis(50);
/// Wired entries kept for the policy of the last start that had one (at most the
/// pool's target).
const POLICY_ENTRIES: usize = 2;

/// What entries are made for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Shape {
    /// Size of the disk mounted at `dir/layer` (0 = none).
    pub disk_mb: u32,
    /// Whether it has an egress network (named after its key) already.
    pub wired: bool,
    /// The image whose root is mounted already: its name and layer dirs, top first.
    pub root: Option<(String, Vec<PathBuf>)>,
    /// The policy its chain enforces when wired (open: none of its own).
    pub policy: Policy,
}

struct Shared {
    maker: Maker,
    /// How many entries of the wanted shape to keep (grows with bursts).
    demand: Mutex<Demand>,
    entries: Mutex<Vec<Warm>>,
    /// What refills make: what [`WarmPool::prefer`] set, else the last start's disk.
    shape: Mutex<Shape>,
    /// The policy of the last wired start that had one: entries are kept for it too.
    policy: Mutex<Policy>,
    preferred: AtomicBool,
    filling: AtomicBool,
    /// Whether a refill was ever asked for (the periodic tick refills only such a pool).
    started: AtomicBool,
    /// The most entries refills have made at once (never above [`PARALLEL_QUIET`]).
    making_peak: AtomicUsize,
    closed: AtomicBool,
    /// The images of recent starts kept one parked entry each.
    images: images::Recent,
    /// Sandboxes and entries together at most (see [`WarmPool::cap_at`]).
    cap: AtomicUsize,
    /// Starts under way, each with when it began and, once it ended, when (see
    /// [`WarmPool::starting`]): refills make nothing beside them, nor for
    /// [`FIRST_EXEC`] after one ended.
    under_way: Mutex<Vec<UnderWay>>,
    next_start: AtomicU64,
    /// Entries a refill began to make while a start was under way (none, unless one
    /// began in the instant between the refill's look and its make).
    made_beside_starts: AtomicUsize,
}

/// A start under way, counted until dropped (see [`WarmPool::starting`]).
pub(in crate::linux) struct Starting(Arc<Shared>, u64);

impl Drop for Starting {
    fn drop(&mut self) {
        if let Ok(mut under_way) = self.0.under_way.lock() {
            let now = Instant::now();
            if let Some(start) = under_way.iter_mut().find(|s| s.id == self.1) {
                start.ended = Some(now);
            }
            under_way.retain(|s| s.counts(now));
        }
    }
}

/// A start the refills yield to.
struct UnderWay {
    id: u64,
    began: Instant,
    /// When it ended (its sandbox's first command most likely follows).
    ended: Option<Instant>,
}

impl UnderWay {
    /// Whether refills still yield to it at `now`: under way for less than
    /// [`STUCK_START`], or ended less than [`FIRST_EXEC`] ago.
    fn counts(&self, now: Instant) -> bool {
        match self.ended {
            None => now.saturating_duration_since(self.began) < STUCK_START,
            Some(t) => now.saturating_duration_since(t) < FIRST_EXEC,
        }
    }
}

/// The pool; dropping it ends and removes every entry.
pub(super) struct WarmPool(Arc<Shared>);

impl WarmPool {
    /// A pool of `size` entries (growing up to `max` while starts outrun it), filled in
    /// the background once the first start (or [`WarmPool::prefer`]) says what to
    /// prepare; `net` lets entries be wired; entries lease their id slots from `slots`
    /// (the runtime's allocator, already opened).
    pub fn new(
        config: LinuxConfig,
        cgroups: Cgroups,
        slots: Slots,
        (size, max): (usize, usize),
        net: Option<NetConfig>,
    ) -> Result<Self, RuntimeError> {
        let shared = Shared {
            maker: Maker {
                config,
                cgroups,
                slots,
                net,
                tethered: false,
            },
            demand: Mutex::new(Demand::new(size, max)),
            entries: Mutex::new(Vec::new()),
            shape: Mutex::new(Shape::default()),
            policy: Mutex::new(Policy::default()),
            preferred: AtomicBool::new(false),
            filling: AtomicBool::new(false),
            started: AtomicBool::new(false),
            making_peak: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            images: images::Recent::new(images::DEFAULT_COUNT),
            cap: AtomicUsize::new(usize::MAX),
            under_way: Mutex::new(Vec::new()),
            next_start: AtomicU64::new(0),
            made_beside_starts: AtomicUsize::new(0),
        };
        let shared = Arc::new(shared);
        refill::spawn_tick(
            Arc::downgrade(&shared),
            "warm-inits-tick",
            |s| &s.closed,
            Shared::due,
            Shared::refill,
        );
        Ok(WarmPool(shared))
    }

    /// Whether a refill is under way (making entries, or waiting to retry a failed make).
    pub fn refilling(&self) -> bool {
        self.0.filling.load(Ordering::Acquire)
    }

    /// Entries of the wanted shape ready to be taken (not counting the one kept for
    /// other layer stacks).
    pub fn ready(&self) -> usize {
        let Ok(want) = self.0.shape.lock().map(|s| s.clone()) else {
            return 0;
        };
        self.0
            .entries
            .lock()
            .map_or(0, |e| e.iter().filter(|w| w.shape == want).count())
    }

    /// Every entry ready to be taken, the one kept for other layer stacks included.
    pub fn held(&self) -> usize {
        self.0.entries.lock().map_or(0, |e| e.len())
    }

    /// The most entries refills have made at once so far.
    pub fn making_peak(&self) -> usize {
        self.0.making_peak.load(Ordering::Acquire)
    }

    /// Counts a start as under way until the guard is dropped, and for [`FIRST_EXEC`]
    /// after: while any is, refills wait (making an entry takes the CPUs a small
    /// host's starts, and the first commands of the sandboxes they made, need).
    pub fn starting(&self) -> Starting {
        let id = self.0.next_start.fetch_add(1, Ordering::AcqRel);
        if let Ok(mut under_way) = self.0.under_way.lock() {
            under_way.push(UnderWay {
                id,
                began: Instant::now(),
                ended: None,
            });
        }
        Starting(self.0.clone(), id)
    }

    /// Entries refills began to make while a start was under way, so far.
    pub fn made_beside_starts(&self) -> usize {
        self.0.made_beside_starts.load(Ordering::Acquire)
    }

    /// Entries wired for a policy of their own, ready to be taken.
    pub fn ready_with_policy(&self) -> usize {
        self.0.entries.lock().map_or(0, |e| {
            e.iter().filter(|w| !w.shape.policy.is_open()).count()
        })
    }

    /// Takes a live entry whose disk is `disk_mb` MiB, wired or not, for a sandbox of
    /// image `image` with `layers` (top first) under `policy`: one parked in that very
    /// root, else one with no root yet, if there is one; made for `policy` if there is
    /// one, else (wired) made with none, for the caller to rewrite. A wired start under
    /// a policy makes the refills keep entries for that policy (and no other). With
    /// `plain` (`layers` are the image's own, no snapshot on top), the image is one of
    /// the recent ones the refills park an entry in.
    pub fn take(
        &self,
        (disk_mb, wired): (u32, bool),
        (image, plain): (&str, bool),
        layers: &[PathBuf],
        policy: &Policy,
    ) -> Option<Warm> {
        if wired && !policy.is_open() {
            if let Ok(mut p) = self.0.policy.lock() {
                if *p != *policy {
                    *p = policy.clone();
                }
            }
        }
        if let Ok(mut d) = self.0.demand.lock() {
            d.started(Instant::now());
        }
        let taken = self
            .take_for(disk_mb, wired, image, layers, policy)
            .or_else(|| match policy.is_open() {
                true => None,
                false => self.take_for(disk_mb, wired, image, layers, &Policy::default()),
            });
        if taken.is_none() {
            self.count_miss(disk_mb, wired, image, layers);
        }
        if plain {
            self.note_image(disk_mb, wired, image, layers);
        }
        taken
    }

    /// Remembers a start of `image` (unless the wanted shape parks its root already),
    /// and watches the image records from then on.
    fn note_image(&self, disk_mb: u32, wired: bool, image: &str, layers: &[PathBuf]) {
        let wanted_root = self.0.shape.lock().ok().and_then(|s| s.root.clone());
        if wanted_root.is_some_and(|(i, _)| i == image) {
            return;
        }
        let shape = Shape {
            disk_mb,
            wired: wired && self.0.maker.net.is_some(),
            root: Some((image.to_owned(), layers.to_vec())),
            policy: Policy::default(),
        };
        if self.0.images.note(shape) {
            images::watch(&self.0);
        }
    }

    /// Keeps a parked entry for each of the last `count` images started (0: none).
    pub fn keep_images(&self, count: usize) {
        self.0.images.set_count(count);
    }

    /// The PID 1s parked in image `name`'s root, ready to be taken.
    pub fn parked_in(&self, name: &str) -> Vec<i32> {
        self.0.entries.lock().map_or(Vec::new(), |e| {
            e.iter()
                .filter(|w| w.shape.root.as_ref().is_some_and(|(i, _)| i == name))
                .filter_map(|w| w.parked.map(|(pid, _)| pid))
                .collect()
        })
    }

    fn take_for(
        &self,
        disk_mb: u32,
        wired: bool,
        image: &str,
        layers: &[PathBuf],
        policy: &Policy,
    ) -> Option<Warm> {
        let fits = |w: &Warm| {
            w.shape.disk_mb == disk_mb && w.shape.wired == wired && w.shape.policy == *policy
        };
        let same_root = |w: &Warm| {
            w.shape
                .root
                .as_ref()
                .is_some_and(|(i, l)| i == image && l == layers)
        };
        let mut entries = self.0.entries.lock().ok()?;
        loop {
            let found = entries
                .iter()
                .position(|w| fits(w) && same_root(w))
                .or_else(|| {
                    entries
                        .iter()
                        .position(|w| fits(w) && w.shape.root.is_none())
                });
            let i = found?;
            let mut warm = entries.swap_remove(i);
            if warm.is_alive() {
                // Only the shape the pool makes grows it.
                let wanted = self.0.shape.lock().is_ok_and(|s| *s == warm.shape);
                let left = match wanted {
                    true => entries.iter().filter(|w| w.shape == warm.shape).count(),
                    false => usize::MAX,
                };
                if let Ok(mut d) = self.0.demand.lock() {
                    d.took(Instant::now(), left);
                }
                return Some(warm);
            }
            drop(entries);
            self.0.maker.discard(warm);
            entries = self.0.entries.lock().ok()?;
        }
    }

    /// Grows the pool to `n` entries of the wanted shape now (up to its max), ahead of
    /// any burst, and refills it; it shrinks back to its base like a pool a burst grew.
    pub fn grow_to(&self, n: usize) {
        if let Ok(mut d) = self.0.demand.lock() {
            d.grow_to(n, Instant::now());
        }
        self.refill();
    }

    /// Entries of the wanted shape the pool aims to keep now.
    pub fn target(&self) -> usize {
        let target = self.0.demand.lock().map_or(0, |d| d.target());
        target.min(self.0.room())
    }

    /// Keeps at most `max` minus the sandboxes of the data dir entries, of all shapes:
    /// none is made that no create could take (a server's `max_sandboxes`).
    pub fn cap_at(&self, max: usize) {
        self.0.cap.store(max, Ordering::Release);
    }

    /// A start found nothing: if it asked for what the pool makes, the pool was too
    /// small for the burst it is in and grows to it.
    fn count_miss(&self, disk_mb: u32, wired: bool, image: &str, layers: &[PathBuf]) {
        let Ok(want) = self.0.shape.lock().map(|s| s.clone()) else {
            return;
        };
        let same_root = want
            .root
            .as_ref()
            .is_none_or(|(i, l)| i == image && l == layers);
        if want.disk_mb == disk_mb && want.wired == wired && same_root {
            if let Ok(mut d) = self.0.demand.lock() {
                d.missed(Instant::now());
            }
        }
    }

    /// Makes entries of `shape` from now on, whatever starts ask for (what most will: a
    /// start of another disk or network starts cold and leaves the pool as it is).
    pub fn prefer(&self, mut shape: Shape) {
        shape.wired &= self.0.maker.net.is_some();
        if let Ok(mut s) = self.0.shape.lock() {
            *s = shape;
        }
        self.0.preferred.store(true, Ordering::Release);
        self.refill();
    }

    /// After a start of a `disk_mb` sandbox: tops the pool up on a background thread,
    /// with entries of that size unless a shape is preferred (entries of another shape
    /// are dropped).
    pub fn refill_after(&self, disk_mb: u32) {
        if !self.0.preferred.load(Ordering::Acquire) {
            if let Ok(mut s) = self.0.shape.lock() {
                s.disk_mb = disk_mb;
            }
        }
        self.refill();
    }

    fn refill(&self) {
        self.0.started.store(true, Ordering::Release);
        Shared::refill(&self.0);
    }

    /// Ends an entry that will not be used and removes what it made.
    pub fn discard(&self, warm: Warm) {
        self.0.maker.discard(warm);
    }

    /// Gives a taken entry's id slot to sandbox `id`.
    pub fn hand_over_slot(&self, warm: &Warm, id: uuid::Uuid) -> Result<(), RuntimeError> {
        self.0
            .maker
            .slots
            .hand_over(warm.host_id_base, warm.key, id)
    }

    /// Ends and removes every entry (also run on drop).
    pub fn drain(&self) {
        self.0.closed.store(true, Ordering::Release);
        refill::wait_idle(&self.0.filling);
        let entries = match self.0.entries.lock() {
            Ok(mut e) => std::mem::take(&mut *e),
            Err(_) => return,
        };
        for warm in entries {
            self.0.maker.discard(warm);
        }
    }
}

impl Drop for WarmPool {
    fn drop(&mut self) {
        self.drain();
    }
}

impl Shared {
    fn refill(shared: &Arc<Shared>) {
        refill::spawn(shared, |s| &s.filling, "warm-inits", Shared::fill);
    }

    /// For the periodic tick: whether the pool, once filled, is short of entries with
    /// no refill under way.
    fn due(&self) -> bool {
        let due = self.started.load(Ordering::Acquire)
            && !self.filling.load(Ordering::Acquire)
            && self.short();
        if due {
            tracing::info!("the warm pool is below its target: refilling");
        }
        due
    }

    /// Whether entries the pool wants are missing.
    fn short(&self) -> bool {
        let Some(mut missing) = self.wanted() else {
            return false;
        };
        if let Ok(entries) = self.entries.lock() {
            for w in entries.iter() {
                if let Some(i) = missing.iter().position(|s| *s == w.shape) {
                    missing.swap_remove(i);
                }
            }
        }
        !missing.is_empty()
    }

    /// The entries the pool keeps: the target number of the wanted shape and, when that
    /// has a root parked, one without (for starts of other layer stacks: snapshots,
    /// other images), and one parked in each recent image that still resolves to the
    /// layers it was started with.
    fn wanted(&self) -> Option<Vec<Shape>> {
        let want = self.shape.lock().ok()?.clone();
        let target = self.demand.lock().ok()?.target();
        let mut shapes = vec![want.clone(); target];
        let policy = self.policy.lock().ok()?.clone();
        if want.wired && !policy.is_open() {
            let shape = Shape {
                policy,
                ..want.clone()
            };
            shapes.extend(std::iter::repeat_n(shape, target.min(POLICY_ENTRIES)));
        }
        if want.root.is_some() {
            shapes.push(Shape { root: None, ..want });
        }
        shapes.extend(self.images.current(&self.maker));
        shapes.truncate(self.room());
        Some(shapes)
    }

    /// Entries the cap leaves room for: the cap less the data dir's sandboxes.
    fn room(&self) -> usize {
        let cap = self.cap.load(Ordering::Acquire);
        if cap == usize::MAX {
            return cap;
        }
        let sandboxes =
            std::fs::read_dir(self.maker.config.data_dir.join("sandboxes")).map_or(0, |d| {
                d.flatten()
                    .filter(|e| {
                        e.file_name()
                            .to_str()
                            .is_some_and(|n| n.parse::<uuid::Uuid>().is_ok())
                    })
                    .count()
            });
        cap.saturating_sub(sandboxes)
    }

    /// Waits until no start is under way and starts pause (or the pool has nothing
    /// left for them), or the refill has waited [`MAX_YIELD`] since `since`; `None`
    /// once the pool is closed. Making entries (an exec of this binary, cgroups,
    /// mounts, a disk) takes both CPUs of a small host: measured, warm starts in a
    /// burst took 10-20 ms with a refill beside them and ~5 ms without, so the refill
    /// lets a burst finish first — an empty pool too (a start that finds it empty does
    /// a make's work itself; one made beside it only slows both). Starts that never
    /// pause (each overlapping the next) would keep it waiting for ever: past
    /// [`MAX_YIELD`] one entry at a time is made beside them.
    fn wait_for_pause(&self, since: Instant) -> Option<Gate> {
        loop {
            if self.closed.load(Ordering::Acquire) {
                return None;
            }
            let quiet = self
                .demand
                .lock()
                .map_or(Duration::MAX, |d| d.quiet_for(Instant::now()));
            let want = self.shape.lock().map(|s| s.clone()).ok();
            let left = self.entries.lock().map_or(0, |e| {
                e.iter().filter(|w| Some(&w.shape) == want.as_ref()).count()
            });
            let waited = since.elapsed();
            match gate(quiet, left, self.starts_under_way(), waited) {
                Gate::Wait => std::thread::sleep(Duration::from_millis(5)),
                open => return Some(open),
            }
        }
    }

    /// Starts the refill yields to now (see [`UnderWay::counts`]).
    fn starts_under_way(&self) -> usize {
        let now = Instant::now();
        self.under_way
            .lock()
            .map_or(0, |u| u.iter().filter(|s| s.counts(now)).count())
    }

    fn fill(&self) {
        let mut failures = 0;
        loop {
            let Some(wanted) = self.wanted() else {
                return;
            };
            let (stale, missing) = match self.entries.lock() {
                Ok(mut e) => {
                    let mut missing = wanted.clone();
                    let (keep, stale): (Vec<Warm>, Vec<Warm>) = std::mem::take(&mut *e)
                        .into_iter()
                        .partition(|w| match missing.iter().position(|s| *s == w.shape) {
                            Some(i) => {
                                missing.swap_remove(i);
                                true
                            }
                            None => false,
                        });
                    *e = keep;
                    if missing.is_empty() && stale.is_empty() {
                        return;
                    }
                    (stale, missing)
                }
                Err(_) => return,
            };
            for warm in stale {
                self.maker.discard(warm);
            }
            let since = Instant::now();
            if missing.is_empty() || self.wait_for_pause(since).is_none() {
                return;
            }
            // Several makers at once, each taking the next missing entry as soon as its
            // last is done (no batch waits for its slowest): most of making one is
            // waiting (the exec, the RCU grace period of the first cgroup move, the
            // loop device), which entries made together share, and the rest spreads
            // over the host's CPUs.
            let making = Making::default();
            std::thread::scope(|s| {
                for _ in 0..PARALLEL_QUIET {
                    s.spawn(|| self.make_while_missing(&making, since));
                }
            });
            if making.errored.load(Ordering::Acquire) {
                // A make failed (a temporary shortage, a sweep racing it): tried again
                // a few times, waiting longer each time, then left to the next start
                // or tick.
                failures += 1;
                if !refill::retry_after_failure(failures, &self.closed, "warm inits") {
                    return;
                }
                continue;
            }
            if making.failed.load(Ordering::Acquire) {
                return;
            }
            failures = 0;
        }
    }

    /// One maker of a refill: makes missing entries one after another until none is
    /// left to make, the pool closes, or a make fails; `since`: when the refill began
    /// to wait (then when this maker's last make ended).
    fn make_while_missing(&self, making: &Making, mut since: Instant) {
        loop {
            if making.failed.load(Ordering::Acquire) {
                return;
            }
            let Some(open) = self.wait_for_pause(since) else {
                return;
            };
            let shape = match self.claim(making, open == Gate::MakeOne) {
                Claim::Make(shape) => {
                    if self.starts_under_way() > 0 {
                        self.made_beside_starts.fetch_add(1, Ordering::AcqRel);
                    }
                    shape
                }
                Claim::Busy => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Claim::Done => return,
            };
            let made =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.maker.make(&shape)))
                    .unwrap_or_else(|_| {
                        Err(RuntimeError::AgentStart(
                            "making a warm init panicked".into(),
                        ))
                    });
            if !self.add(shape, made, making) {
                making.failed.store(true, Ordering::Release);
                return;
            }
            since = Instant::now();
        }
    }

    /// The next entry to make (recorded as in the making), if one is missing and fewer
    /// than the bound are in the making: [`PARALLEL`] while starts come,
    /// [`PARALLEL_QUIET`] once they paused, one when `one` (made beside starts that
    /// never paused, see [`gate`]).
    fn claim(&self, making: &Making, one: bool) -> Claim {
        let Some(wanted) = self.wanted() else {
            return Claim::Done;
        };
        let quiet = self
            .demand
            .lock()
            .map_or(Duration::ZERO, |d| d.quiet_for(Instant::now()));
        let bound = match (one, quiet >= PAUSE) {
            (true, _) => 1,
            (false, true) => PARALLEL_QUIET,
            (false, false) => PARALLEL,
        };
        let Ok(entries) = self.entries.lock() else {
            return Claim::Done;
        };
        let Ok(mut shapes) = making.shapes.lock() else {
            return Claim::Done;
        };
        let mut missing = wanted;
        for shape in entries.iter().map(|w| &w.shape).chain(shapes.iter()) {
            if let Some(i) = missing.iter().position(|s| s == shape) {
                missing.remove(i);
            }
        }
        let Some(shape) = missing.into_iter().next() else {
            return Claim::Done;
        };
        if shapes.len() >= bound {
            return Claim::Busy;
        }
        shapes.push(shape.clone());
        self.making_peak.fetch_max(shapes.len(), Ordering::AcqRel);
        Claim::Make(shape)
    }

    /// Adds an entry made for `shape` to the pool if the pool still wants one of that
    /// shape and is open (else removes it again); `false` when none was added.
    fn add(&self, shape: Shape, made: Result<Warm, RuntimeError>, making: &Making) -> bool {
        let done = |shapes: &mut Vec<Shape>| {
            if let Some(i) = shapes.iter().position(|s| *s == shape) {
                shapes.swap_remove(i);
            }
        };
        let warm = match made {
            Ok(warm) => warm,
            Err(e) => {
                tracing::warn!(error = %e, "cannot prepare a warm sandbox init");
                if let Ok(mut shapes) = making.shapes.lock() {
                    done(&mut shapes);
                }
                making.errored.store(true, Ordering::Release);
                return false;
            }
        };
        let wanted = self.wanted().unwrap_or_default();
        let closed = self.closed.load(Ordering::Acquire);
        let kept = match self.entries.lock() {
            Ok(mut e) => {
                let want = wanted.iter().filter(|s| **s == shape).count();
                let have = e.iter().filter(|w| w.shape == shape).count();
                if let Ok(mut shapes) = making.shapes.lock() {
                    done(&mut shapes);
                }
                if !closed && have < want {
                    // Under the lock: once the mark is there, a start finds the entry.
                    let mark = warm.dir.join(entry::READY_FILE);
                    if let Err(err) = std::fs::write(&mark, b"") {
                        tracing::debug!(error = %err, "marking a warm init ready");
                    }
                    e.push(warm);
                    None
                } else {
                    Some(warm)
                }
            }
            Err(_) => Some(warm),
        };
        match kept {
            None => true,
            Some(warm) => {
                self.maker.discard(warm);
                false
            }
        }
    }
}

/// How long a start may stay under way before refills stop waiting for it (a start
/// stuck on a slow host must not stop the pool's refill).
const STUCK_START: Duration = Duration::from_secs(10);

/// How long after a start ended refills still yield to it: the client's first command
/// in the new sandbox most likely follows at once. An exec trace of `sandboxd bench`'s
/// first burst of 20 (which empties a pool of 20, so the refill may begin as soon as no
/// start is under way) showed the refill's first two makes beginning while the burst's
/// last first commands still ran.
const FIRST_EXEC: Duration = Duration::from_millis(25);

/// How long a refill yields to starts before it makes one entry at a time beside them:
/// longer than a burst's starts take, far shorter than [`STUCK_START`] (starts that
/// overlap without a pause, each short, would otherwise keep the pool from ever
/// refilling: every start cold).
const MAX_YIELD: Duration = Duration::from_millis(150);

/// What a refill may do now (see [`gate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// Make entries, as many at once as [`Shared::claim`] bounds.
    Make,
    /// Make one entry at a time: starts are under way, but it has yielded long enough.
    MakeOne,
    /// Wait.
    Wait,
}

/// What a refill that has `waited` may do: make when no start is under way
/// (`starting`: those under way for less than [`STUCK_START`]) and starts paused for
/// [`PAUSE`] or none are left for them; else make one at a time once it has waited
/// [`MAX_YIELD`]; else wait.
fn gate(quiet: Duration, left: usize, starting: usize, waited: Duration) -> Gate {
    if starting == 0 && (quiet >= PAUSE || left == 0) {
        Gate::Make
    } else if waited >= MAX_YIELD {
        Gate::MakeOne
    } else {
        Gate::Wait
    }
}

/// What a maker of a refill does next.
enum Claim {
    /// Make an entry of this shape.
    Make(Shape),
    /// Wait: as many as the bound allows are in the making.
    Busy,
    /// Stop: nothing is left to make.
    Done,
}

/// The entries one refill is making.
#[derive(Default)]
struct Making {
    /// The shapes in the making now.
    shapes: Mutex<Vec<Shape>>,
    /// A make failed or its entry was not wanted any more: the refill stops.
    failed: AtomicBool,
    /// A make failed: the refill tries again after a while (see [`RETRIES`]).
    errored: AtomicBool,
}

/// Removes the entries under `data_dir` whose owning process is gone (one killed before
/// it could drain its pool); run by every runtime that opens the data dir, and (with
/// [`EmptyDirs::Leave`]) by a running process's later sweeps.
pub(super) fn sweep_stale(data_dir: &Path, cgroups: &Cgroups, slots: &Slots, empty: EmptyDirs) {
    entry::sweep_stale(data_dir, cgroups, slots, empty)
}

pub(super) use entry::EmptyDirs;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refill_waits_for_starts_under_way_and_for_a_pause() {
        let ms = Duration::from_millis;
        let fresh = ms(0);
        // Starts paused, none under way: make.
        assert_eq!(gate(PAUSE, 3, 0, fresh), Gate::Make);
        // The pool empty and nothing under way: make at once.
        assert_eq!(gate(ms(1), 0, 0, fresh), Gate::Make);
        // A start under way (a burst): wait, even with the pool empty or a pause.
        assert_eq!(gate(ms(1), 0, 1, fresh), Gate::Wait);
        assert_eq!(gate(PAUSE, 3, 2, MAX_YIELD - ms(1)), Gate::Wait);
        // Starts still coming and entries left: wait.
        assert_eq!(gate(ms(1), 3, 0, fresh), Gate::Wait);
    }

    #[test]
    fn a_start_counts_until_its_first_command_may_have_run() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let start = |ended: Option<Duration>| UnderWay {
            id: 0,
            began: t,
            ended: ended.map(|d| t + d),
        };
        assert!(start(None).counts(t + ms(10)), "under way");
        assert!(
            !start(None).counts(t + STUCK_START),
            "stuck: no longer waited for"
        );
        assert!(
            start(Some(ms(3))).counts(t + ms(3) + FIRST_EXEC - ms(1)),
            "just ended"
        );
        assert!(
            !start(Some(ms(3))).counts(t + ms(3) + FIRST_EXEC),
            "its first command's time is over"
        );
    }

    #[test]
    fn a_refill_makes_one_at_a_time_once_it_has_yielded_long_enough() {
        let ms = Duration::from_millis;
        // Starts that never pause: past the bound, one entry at a time beside them.
        assert_eq!(gate(ms(1), 0, 3, MAX_YIELD), Gate::MakeOne);
        assert_eq!(gate(ms(1), 2, 1, ms(5000)), Gate::MakeOne);
        // None under way and a pause: as many as the quiet bound allows, still.
        assert_eq!(gate(PAUSE, 2, 0, ms(5000)), Gate::Make);
        assert!(MAX_YIELD < STUCK_START);
    }
}
