#!/usr/bin/env python3
"""Interleaved A/B of `sandboxd run -- /bin/true` (egress and none) against bwrap.

Usage: python3 scripts/ab_run.py OLD_BINARY NEW_BINARY [MORE…] SAMPLES
Each binary uses its own data dir under /tmp/ab; the order alternates each round. Use two
binaries for egress figures: they share the host's parked networks, so a binary that
always runs between two others finds none parked more often.
"""
import subprocess, sys, time, statistics, os
bins = sys.argv[1:-1]; n = int(sys.argv[-1])
dirs = {b: f"/tmp/ab/d{i}" for i, b in enumerate(bins)}
for d in dirs.values(): os.makedirs(d, exist_ok=True)
def once(cmd, cwd=None):
    t = time.perf_counter(); subprocess.run(cmd, check=True, cwd=cwd, stdout=subprocess.DEVNULL); took = (time.perf_counter() - t) * 1e3
    time.sleep(0.2)  # a run's detached teardown is over before the next sample (as in `sandboxd bench`)
    return took
res = {}
for b in bins:  # warm up
    for net in ("egress", "none"):
        once([b, "run", "--data-dir", dirs[b], "--network", net, "--", "/bin/true"])
for i in range(n):
    for net in ("egress", "none"):
        res.setdefault(("bwrap", net), []).append(once(["bwrap", "--unshare-all", "--ro-bind", "/", "/", "/bin/true"]))
        for b in (bins if i % 2 == 0 else bins[::-1]):
            res.setdefault((b, net), []).append(once([b, "run", "--data-dir", dirs[b], "--network", net, "--", "/bin/true"]))
for k, v in res.items():
    print(f"{k[0]:45s} {k[1]:7s} median {statistics.median(v):7.2f} ms  (min {min(v):.2f})")
for net in ("egress", "none"):
    bw = statistics.median(res[("bwrap", net)])
    print(net, " ".join(f"{os.path.basename(os.path.dirname(os.path.dirname(b)))}/{os.path.basename(b)}={statistics.median(res[(b,net)])/bw:.2f}x" for b in bins))
