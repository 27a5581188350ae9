#!/bin/bash
# Whether the warm pool's refill makes entries beside a burst's first commands: runs
# `BIN bench --speed-only --samples 3` under `perf record` of every exec and fork on the
# host, then, for each cluster of 20 `/bin/true` execs (a burst's first commands), prints
# how long the cluster lasted and when (relative to its first exec) the refill's makes
# (execs whose parent thread is named `warm-inits`) began. Run as root, 40 s or more after
# any earlier bench (its parked networks must be gone), with nothing else running.
#
# usage: scripts/trace_burst_refill.sh [BIN]   (default ./target/release/sandboxd)
set -euo pipefail
bin=${1:-./target/release/sandboxd}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
perf record -q -a -k CLOCK_MONOTONIC -e sched:sched_process_exec -e sched:sched_process_fork \
    -o "$work/perf.data" "$bin" bench --speed-only --samples 3 --data-dir "$work/data" 2>&1 |
    grep -E "burst of"
perf script -i "$work/perf.data" -F comm,pid,tid,time,event,trace 2>/dev/null > "$work/events.txt"
python3 - "$work/events.txt" <<'PY'
import re, sys
events = []
for line in open(sys.argv[1]):
    m = re.match(r'\s*(.+?)\s+(\d+)/(\d+)\s+([\d.]+):\s+sched:(\S+):\s+(.*)', line)
    if m:
        events.append((float(m.group(4)), int(m.group(2)), m.group(5), m.group(6)))
# Each child's parent thread, by name (a fork event's comm is the forking thread's).
parent = {}
for line in open(sys.argv[1]):
    m = re.match(r'\s*(.+?)\s+\d+/\d+\s+[\d.]+:\s+sched:sched_process_fork:.*child_pid=(\d+)', line)
    if m:
        parent[int(m.group(2))] = m.group(1)
trues = [t for t, pid, event, rest in events if event == 'sched_process_exec' and rest.startswith('filename=/bin/true')]
i = 0
while i < len(trues):
    j = i
    while j + 1 < len(trues) and trues[j + 1] - trues[j] < 0.02:
        j += 1
    if j - i + 1 >= 15:
        a, b = trues[i], trues[j]
        makes = [(t - a) * 1e3 for t, pid, event, rest in events
                 if event == 'sched_process_exec' and a - 0.03 <= t <= b + 0.05 and parent.get(pid) == 'warm-inits']
        beside = sum(1 for m in makes if 0 <= m <= (b - a) * 1e3)
        print(f"burst: {j - i + 1} first commands over {(b - a) * 1e3:.1f} ms; refill makes began at "
              + (", ".join(f"{m:+.1f}" for m in makes) or "none") + f" ms ({beside} beside the commands)")
    i = j + 1 if j > i else i + 1
PY
