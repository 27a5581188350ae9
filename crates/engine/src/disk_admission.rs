//! Disk admission: the size-limited writable layers of active sandboxes must fit, all
//! filled, in the room the data dir has for them (its free space plus what their sparse
//! images already occupy) times the operator's overcommit, minus a reserve kept for the
//! database and the server. A create past it is refused before anything is made.
//! A snapshot is admitted the same way: what it may write must fit in that room less
//! what the active sandboxes may still write into their layers (see `snapshot_admission`).

use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use sandboxd_runtime::DiskSpace;
use sandboxd_store::{SandboxRecord, WorkspaceUsage};
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// How much of the data dir's room the layers may promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskPolicy {
    /// Promised layer sizes per byte of room, in percent (100: every layer can fill up;
    /// above 100, sandboxes that fill their layers together can fill the host).
    pub overcommit_percent: u32,
    /// MiB of the room kept for the database and the server, never promised to layers.
    pub reserve_mb: u64,
}

impl Default for DiskPolicy {
    fn default() -> Self {
        Self {
            overcommit_percent: 100,
            reserve_mb: 64,
        }
    }
}

/// MiB the layers of all sandboxes together may promise in `space` under `policy`.
pub fn budget_mb(space: DiskSpace, policy: DiskPolicy) -> u64 {
    let room = u128::from(space.available.saturating_add(space.layers));
    let promised = room * u128::from(policy.overcommit_percent) / 100;
    let promised = u64::try_from(promised / u128::from(MIB)).unwrap_or(u64::MAX);
    promised.saturating_sub(policy.reserve_mb)
}

/// Admits a `want_mb` layer next to `committed_mb` already promised. A layer larger
/// than the filesystem could ever hold for sandboxes, when the client asked for that
/// size (`asked`), is its mistake: `InvalidArgument`. Anything else that does not fit
/// now is a shortage: `CapacityExhausted`, retry later (a size the client did not ask
/// for, the server's default or a snapshot's, which could never fit, is the operator's
/// to fix: no retry is offered).
pub fn admit(
    space: DiskSpace,
    policy: DiskPolicy,
    committed_mb: u64,
    want_mb: u32,
    asked: bool,
) -> Result<(), EngineError> {
    let budget = budget_mb(space, policy);
    let ever = budget_mb(
        DiskSpace {
            available: space.total,
            layers: 0,
            total: space.total,
            inodes_available: space.inodes_available,
        },
        policy,
    );
    let want = u64::from(want_mb);
    if want > ever && asked {
        return Err(EngineError::invalid(format!(
            "the disk ({want} MiB) is larger than this server can ever hold for sandboxes \
             ({ever} MiB); ask for a smaller disk_mb"
        )));
    }
    if want > ever {
        return Err(EngineError::new(
            ErrorCode::CapacityExhausted,
            format!(
                "this server cannot hold a sandbox disk of {want} MiB (at most {ever} MiB): \
                 its operator must lower the default disk size"
            ),
        ));
    }
    if committed_mb.saturating_add(want) > budget {
        let free = budget.saturating_sub(committed_mb);
        return Err(EngineError::new(
            ErrorCode::CapacityExhausted,
            format!(
                "the server has {free} MiB of disk left for sandboxes, {want} MiB asked; \
                 retry once other sandboxes end or snapshots are deleted"
            ),
        )
        .retry_after(Duration::from_secs(5)));
    }
    Ok(())
}

/// Admits a snapshot that may write `want` bytes: they must fit in the room left once
/// the `committed_mb` layers are promised and `reserved` bytes are held for snapshots
/// being written, or it is refused as a shortage (retry once sandboxes end or
/// snapshots are deleted).
pub fn admit_snapshot(
    space: DiskSpace,
    policy: DiskPolicy,
    committed_mb: u64,
    reserved: u64,
    want: u64,
) -> Result<(), EngineError> {
    let budget = budget_mb(space, policy).saturating_mul(MIB);
    let room = budget
        .saturating_sub(committed_mb.saturating_mul(MIB))
        .saturating_sub(reserved);
    if want <= room {
        return Ok(());
    }
    Err(EngineError::new(
        ErrorCode::CapacityExhausted,
        format!(
            "not enough disk for this snapshot: it may take {} MiB, and the server has {} MiB \
             left beside what its sandboxes may still write; retry once sandboxes end or \
             snapshots are deleted",
            want.div_ceil(MIB),
            room / MIB
        ),
    )
    .retry_after(Duration::from_secs(30)))
}

/// Inodes of the data dir never given to snapshots: the database, the server's files,
/// image pulls and the warm pool's entries.
pub const INODE_RESERVE: u64 = 8192;

/// Inodes of the data dir an active sandbox may still need there (its state dir, its
/// sockets and marks; its files live on its own disk, or unaccounted without one).
pub const INODES_PER_SANDBOX: u64 = 256;

/// Admits a snapshot that stores `want` entries (an inode each, however small): they
/// must fit in the data dir's free inodes less [`INODE_RESERVE`], what the `active`
/// sandboxes may still need and the `reserved` inodes of snapshots being written, or it
/// is refused as a shortage, like a snapshot short of bytes.
pub fn admit_snapshot_inodes(
    space: DiskSpace,
    active: u64,
    reserved: u64,
    want: u64,
) -> Result<(), EngineError> {
    let room = space
        .inodes_available
        .saturating_sub(INODE_RESERVE)
        .saturating_sub(active.saturating_mul(INODES_PER_SANDBOX))
        .saturating_sub(reserved);
    if want <= room {
        return Ok(());
    }
    Err(EngineError::new(
        ErrorCode::CapacityExhausted,
        format!(
            "not enough free inodes on the disk for this snapshot: it stores {want} files and directories, and the server has room for {room} beside what its sandboxes may still need; retry once sandboxes end or snapshots are deleted"
        ),
    )
    .retry_after(Duration::from_secs(30)))
}

impl Engine {
    /// The room a `disk_mb` layer (0: unlimited, not accounted) is admitted against,
    /// measured before admission (beside the plan; one measure for the creates that ask
    /// together, see [`Engine::disk_space`]): `None` admits it (no layer to account, or
    /// a backend that measures no room).
    pub(crate) async fn measure_disk(
        &self,
        disk_mb: u32,
    ) -> Result<Option<DiskSpace>, EngineError> {
        if disk_mb == 0 {
            return Ok(None);
        }
        self.disk_space().await
    }

    /// The backend's measure of the data dir's room (`None`: it measures none), begun
    /// after this call: shared by the callers that ask together (`shared_measure`).
    pub(crate) async fn disk_space(&self) -> Result<Option<DiskSpace>, EngineError> {
        let measure = async {
            self.blocking(|rt| rt.disk_space())
                .await?
                .map_err(|e| crate::engine::runtime_error("cannot measure the disk", e))
        };
        self.disk_measure.get(measure).await
    }

    /// Whether a `disk_mb` layer (`asked` by the client) fits in `space` next to the
    /// layers of the `active` sandboxes (summed per workspace) and the snapshots being
    /// written.
    pub(crate) fn check_disk(
        &self,
        space: Option<DiskSpace>,
        active: &[WorkspaceUsage],
        disk_mb: u32,
        asked: bool,
    ) -> Result<(), EngineError> {
        let Some(space) = space else {
            return Ok(());
        };
        let default = u64::from(self.limits.disk_mb_per_sandbox);
        let promised: u64 = active
            .iter()
            .map(|u| {
                u.disk_mb
                    .saturating_add(u.default_disk.saturating_mul(default))
            })
            .sum();
        let reserved = self.disk_reservations.reserved().div_ceil(MIB);
        admit(
            space,
            self.limits.disk_policy,
            promised.saturating_add(reserved),
            disk_mb,
            asked,
        )
    }

    /// MiB the limited layers of the `active` sandboxes are promised.
    pub(crate) fn committed_mb(&self, active: &[SandboxRecord]) -> u64 {
        let default = self.limits.disk_mb_per_sandbox;
        active
            .iter()
            .map(|r| u64::from(r.disk_mb.unwrap_or(default)))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(available_mb: u64, layers_mb: u64) -> DiskSpace {
        DiskSpace {
            available: available_mb * MIB,
            layers: layers_mb * MIB,
            total: 2000 * MIB,
            inodes_available: 100_000,
        }
    }

    #[test]
    fn room_counts_free_space_and_the_layers_own_blocks_minus_the_reserve() {
        let p = DiskPolicy::default();
        assert_eq!(budget_mb(space(1000, 0), p), 936);
        assert_eq!(budget_mb(space(900, 100), p), 936);
        assert_eq!(
            budget_mb(space(10, 0), p),
            0,
            "the reserve never goes negative"
        );
        let over = DiskPolicy {
            overcommit_percent: 250,
            reserve_mb: 0,
        };
        assert_eq!(budget_mb(space(100, 0), over), 250);
        let huge = DiskPolicy {
            overcommit_percent: u32::MAX,
            reserve_mb: 0,
        };
        assert!(budget_mb(space(u64::MAX / MIB, u64::MAX / MIB), huge) > 0);
    }

    #[test]
    fn at_the_edge_then_past_it_temporarily_then_forever() {
        let p = DiskPolicy::default();
        let s = space(1064, 0);
        assert!(
            admit(s, p, 900, 100, true).is_ok(),
            "exactly the budget fits"
        );
        let later = admit(s, p, 901, 100, true).unwrap_err();
        assert_eq!(later.code, ErrorCode::CapacityExhausted);
        assert_eq!(later.retry_after, Some(Duration::from_secs(5)));
        assert!(
            later.message.contains("99 MiB of disk left"),
            "{}",
            later.message
        );
        // Past today's room, within the filesystem's: a shortage, not the client's fault.
        let short = admit(s, p, 0, 1001, true).unwrap_err();
        assert_eq!(short.code, ErrorCode::CapacityExhausted);
        assert!(short.retry_after.is_some());
        let never = admit(s, p, 0, 1937, true).unwrap_err();
        assert_eq!(never.code, ErrorCode::InvalidArgument);
        assert!(never.message.contains("(1936 MiB)"), "{}", never.message);
        // The server's own default that could never fit: not blamed on the client.
        let default = admit(s, p, 0, 1937, false).unwrap_err();
        assert_eq!(default.code, ErrorCode::CapacityExhausted);
        assert_eq!(default.retry_after, None);
    }

    #[test]
    fn a_snapshot_fits_only_beside_what_sandboxes_may_still_write() {
        let p = DiskPolicy::default();
        let s = space(1064, 0); // budget 1000 MiB
        assert!(admit_snapshot(s, p, 900, 0, 100 * MIB).is_ok());
        let e = admit_snapshot(s, p, 900, 1, 100 * MIB).unwrap_err();
        assert_eq!(e.code, ErrorCode::CapacityExhausted);
        assert!(e.retry_after.is_some());
        assert!(admit_snapshot(s, p, 900, 40 * MIB, 60 * MIB).is_ok());
        assert!(admit_snapshot(s, p, 2000, 0, 0).is_ok(), "nothing to write");
        assert!(admit_snapshot(s, p, 2000, 0, 1).is_err());
    }

    #[test]
    fn a_snapshot_of_empty_files_is_refused_for_inodes_though_its_bytes_fit() {
        let s = space(1064, 0); // 100_000 free inodes
        let room = 100_000 - INODE_RESERVE - 2 * INODES_PER_SANDBOX;
        assert!(admit_snapshot_inodes(s, 2, 0, room).is_ok());
        let e = admit_snapshot_inodes(s, 2, 1, room).unwrap_err();
        assert_eq!(e.code, ErrorCode::CapacityExhausted);
        assert!(e.retry_after.is_some());
        assert!(e.message.contains("inodes"), "{}", e.message);
        assert!(
            admit_snapshot_inodes(s, 3, 0, room).is_err(),
            "a sandbox more"
        );
        let tiny = DiskSpace {
            inodes_available: 10,
            ..s
        };
        assert!(
            admit_snapshot_inodes(tiny, 0, 0, 1).is_err(),
            "never into the reserve"
        );
    }

    #[test]
    fn a_filesystem_with_no_inode_limit_admits_any_entry_count() {
        let unlimited = DiskSpace {
            inodes_available: u64::MAX,
            ..space(1064, 0)
        };
        assert!(admit_snapshot_inodes(unlimited, 1000, 1 << 40, 1 << 40).is_ok());
    }
}
