#!/usr/bin/env python3
"""Interleaved A/B of two sandboxd binaries' egress `run -- /bin/true` when no shared
nftables table exists (the first run after an idle spell): parked networks linger 0 s,
and each sample waits until the previous run's table is gone.

Usage: python3 scripts/ab_idle_run.py OLD_BINARY NEW_BINARY ROUNDS [DATA_DIR]
Needs root and `nft`; prints each binary's median and minimum wall time."""
import os
import statistics
import subprocess
import sys
import time


def table_gone():
    for _ in range(1000):
        out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
        if "inet sandboxd" not in out:
            return
        time.sleep(0.01)
    sys.exit("the shared table never went")


def main():
    old, new, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    data = sys.argv[4] if len(sys.argv) > 4 else "/tmp/ab-idle-run"
    env = dict(os.environ, SANDBOXD_NET_LINGER_SECS="0")
    took = {old: [], new: []}
    for _ in range(rounds):
        for exe in (old, new):
            table_gone()
            time.sleep(0.1)
            t = time.perf_counter()
            subprocess.run([exe, "run", "--data-dir", data, "--", "/bin/true"], env=env, check=True)
            took[exe].append((time.perf_counter() - t) * 1e3)
    for exe in (old, new):
        print(f"{exe}: median {statistics.median(took[exe]):.2f} ms, min {min(took[exe]):.2f} ms")


if __name__ == "__main__":
    main()
