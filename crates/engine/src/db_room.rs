//! Room for the database's own growth: a write that grows it (a create's record, an
//! idempotent answer kept) is admitted only while the data dir has room left beside
//! what the active sandboxes' layers may still write and the snapshots being written
//! hold, that is, while the disk is not down to its reserve (`disk_reserve_mb`); past
//! it the write is refused as a temporary shortage (`CapacityExhausted`, retry later)
//! instead of eating the room owed to sandboxes. The measure is cached for a moment,
//! so that a burst of writes measures the disk once.

use crate::disk_admission::budget_mb;
use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use sandboxd_runtime::DiskSpace;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// Least room (bytes) a write that grows the database is admitted with.
pub const DB_WRITE_ROOM: u64 = MIB;
/// How long one measure of the room stands for later writes.
const FRESH: Duration = Duration::from_secs(2);
/// How soon a write refused for room may retry.
const RETRY: Duration = Duration::from_secs(30);

/// The last measured room for the database: when, and how many bytes (`None`: the
/// backend measures no room, nothing to admit).
#[derive(Debug, Default)]
pub(crate) struct DbRoom {
    last: Mutex<Option<(Instant, Option<u64>)>>,
}

/// Bytes the database may still grow by in `space`: the room the layers are admitted
/// against, less the `committed_mb` they are promised and the `reserved` bytes of
/// snapshots being written (the database's size is already out of the free space).
pub fn room(
    space: DiskSpace,
    policy: crate::disk_admission::DiskPolicy,
    committed_mb: u64,
    reserved: u64,
) -> u64 {
    budget_mb(space, policy)
        .saturating_sub(committed_mb)
        .saturating_mul(MIB)
        .saturating_sub(reserved)
}

/// `Ok` when `room` admits a write that grows the database, else the shortage.
pub fn admit(room: u64) -> Result<(), EngineError> {
    if room >= DB_WRITE_ROOM {
        return Ok(());
    }
    Err(EngineError::new(
        ErrorCode::CapacityExhausted,
        "the server's disk is down to the room it keeps for itself: nothing more can be \
         recorded now; retry once sandboxes end or snapshots are deleted",
    )
    .retry_after(RETRY))
}

impl DbRoom {
    fn cached(&self) -> Option<Option<u64>> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.filter(|(at, _)| at.elapsed() < FRESH)
            .map(|(_, room)| room)
    }

    fn keep(&self, room: Option<u64>) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        *last = Some((Instant::now(), room));
    }
}

impl Engine {
    /// Admits a write that grows the database (see the module): `CapacityExhausted`
    /// with a retry when the data dir is down to its reserve.
    pub async fn admit_db_growth(&self) -> Result<(), EngineError> {
        let room = match self.db_room.cached() {
            Some(room) => room,
            None => {
                let room = self.measure_db_room().await?;
                self.db_room.keep(room);
                room
            }
        };
        room.map_or(Ok(()), admit)
    }

    async fn measure_db_room(&self) -> Result<Option<u64>, EngineError> {
        let Some(space) = self.disk_space().await? else {
            return Ok(None);
        };
        let active = self
            .store
            .sandboxes_in_status(&crate::state::ACTIVE_STATUSES)?;
        Ok(Some(room(
            space,
            self.limits.disk_policy,
            self.committed_mb(&active),
            self.disk_reservations.reserved(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk_admission::DiskPolicy;

    fn space(available_mb: u64) -> DiskSpace {
        DiskSpace {
            available: available_mb * MIB,
            layers: 0,
            total: 2000 * MIB,
            inodes_available: 100_000,
        }
    }

    #[test]
    fn the_database_grows_only_outside_the_reserve_and_the_room_owed_to_layers() {
        let p = DiskPolicy::default(); // 64 MiB reserve
        assert_eq!(room(space(65), p, 0, 0), MIB);
        assert!(admit(room(space(65), p, 0, 0)).is_ok());
        let at_reserve = admit(room(space(64), p, 0, 0)).unwrap_err();
        assert_eq!(at_reserve.code, ErrorCode::CapacityExhausted);
        assert!(at_reserve.retry_after.is_some());
        // Room promised to layers or held for a snapshot is not the database's.
        assert!(admit(room(space(1064), p, 1000, 0)).is_err());
        assert!(admit(room(space(1064), p, 999, 0)).is_ok());
        assert!(admit(room(space(1064), p, 999, MIB)).is_err());
        assert!(admit(room(space(10), p, 0, 0)).is_err(), "never negative");
    }
}
