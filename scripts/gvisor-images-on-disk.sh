#!/usr/bin/env bash
# Lists the gVisor memory images under the given sandboxd data dirs: sandboxes paused to
# disk (`sandboxes/<id>/memory/checkpoint.img`) and memory snapshots
# (`memory-snapshots/<id>/checkpoint.img`). A runsc of another release may not restore
# them, so scripts/setup.sh does not change runsc while any is there. Exits 1 when it
# found one, 0 when none (missing dirs hold none).
set -euo pipefail
found=0
for dir in "$@"; do
    [ -d "$dir" ] || continue
    while IFS= read -r -d '' img; do
        echo "$img"
        found=1
    done < <(find "$dir/sandboxes" "$dir/memory-snapshots" -mindepth 2 -maxdepth 3 \
        -name checkpoint.img -print0 2>/dev/null || true)
done
exit "$((found))"
