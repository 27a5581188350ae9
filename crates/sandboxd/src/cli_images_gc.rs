//! What uses images and layers, from the store: snapshots (templates are snapshots)
//! of every workspace and every live sandbox, for `images rm` and `images prune`.

use anyhow::Result;
use sandboxd_engine::state::ACTIVE_STATUSES;
use sandboxd_images::Images;
use sandboxd_runtime::linux::layer_pins;
use sandboxd_store::{Keyset, SnapshotRecord, SqliteStore, Store};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How long a collection waits for a server to drop the warm inits of removed images.
const WARM_DROP_WAIT: Duration = Duration::from_secs(5);

/// Every snapshot of every workspace.
fn all_snapshots(store: &SqliteStore) -> Result<Vec<SnapshotRecord>> {
    let mut out = Vec::new();
    for ws in store.list_workspaces()? {
        let mut after = None;
        loop {
            let page = store.list_snapshots(&ws.id, None, 500, after)?;
            after = page.last().map(|s| Keyset {
                created_at: s.created_at,
                id: s.id,
            });
            let done = page.len() < 500;
            out.extend(page);
            if done {
                break;
            }
        }
    }
    Ok(out)
}

/// The stored name `image` resolves to (it may be another spelling), if any.
fn stored_name(images: &Images, image: &str) -> Option<String> {
    images.get(image).ok().map(|i| i.name)
}

/// Live sandboxes and snapshots (templates) that run stored image `name`.
pub fn users_of(images: &Images, store: &SqliteStore, name: &str) -> Result<Vec<String>> {
    let mut users = Vec::new();
    for sb in store.sandboxes_in_status(&ACTIVE_STATUSES)? {
        if stored_name(images, &sb.image).as_deref() == Some(name) {
            users.push(format!("sandbox {}", sb.id));
        }
    }
    for snap in all_snapshots(store)? {
        if stored_name(images, &snap.image).as_deref() == Some(name) {
            let what = match snap
                .name
                .as_deref()
                .and_then(|n| n.strip_prefix("template:"))
            {
                Some(t) => format!("template {t} of workspace {}", snap.workspace),
                None => format!("snapshot {}", snap.id),
            };
            users.push(what);
        }
    }
    Ok(users)
}

/// Layers that snapshots, templates, live sandboxes and warm inits use, with their
/// images' layers (also those every live sandbox's state dir lists: its image record
/// may be gone).
pub fn layers_in_use(images: &Images, store: &SqliteStore) -> Result<HashSet<String>> {
    let sandboxes = images.data_dir().join("sandboxes");
    let mut keep = used_by_records(images, store)?;
    keep.extend(layer_pins::pinned_layers(&sandboxes));
    Ok(keep)
}

/// Layers only a running server's warm inits hold: those of images removed since.
fn held_only_by_warm_inits(images: &Images, store: &SqliteStore) -> Result<HashSet<String>> {
    let sandboxes = images.data_dir().join("sandboxes");
    let warm = layer_pins::pinned_by_live_warm_inits(&sandboxes);
    if warm.is_empty() {
        return Ok(warm);
    }
    let mut others = used_by_records(images, store)?;
    others.extend(layer_pins::pinned_by_sandboxes(&sandboxes));
    for image in images.list() {
        others.extend(image.layers);
    }
    Ok(warm.difference(&others).cloned().collect())
}

/// Layers that snapshots, templates and live sandboxes use by their records, with the
/// layers of the images they name.
fn used_by_records(images: &Images, store: &SqliteStore) -> Result<HashSet<String>> {
    let mut keep = HashSet::new();
    let mut image_names = HashSet::new();
    for sb in store.sandboxes_in_status(&ACTIVE_STATUSES)? {
        keep.extend(sb.extra_layers);
        image_names.insert(sb.image);
    }
    for snap in all_snapshots(store)? {
        keep.extend(snap.layers);
        image_names.insert(snap.image);
    }
    for name in image_names {
        if let Ok(image) = images.get(&name) {
            keep.extend(image.layers);
        }
    }
    Ok(keep)
}

/// One collection over `data_dir`: every stored layer nothing uses and older than
/// `grace` is deleted (`images prune`, `images rm` and the server's collector).
pub fn collect(
    data_dir: &std::path::Path,
    grace: std::time::Duration,
) -> Result<sandboxd_images::gc::PruneReport> {
    let mut images = Images::open(data_dir)?;
    let store = SqliteStore::open(data_dir.join(crate::serve::DATABASE_FILE))?;
    // A running server drops the warm inits of a removed image within a moment (it
    // watches the image records): wait for that, bounded, rather than keep the layers
    // until the next collection.
    let deadline = Instant::now() + WARM_DROP_WAIT;
    while Instant::now() < deadline && !held_only_by_warm_inits(&images, &store)?.is_empty() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let keep = layers_in_use(&images, &store)?;
    Ok(images.prune(&keep, grace)?)
}
