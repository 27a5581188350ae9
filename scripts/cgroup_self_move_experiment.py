#!/usr/bin/env python3
"""Issue 17: times a cgroup v1 move of a forked child made by the parent (its PID to
cgroup.procs: the global threadgroup rwsem, an RCU grace period) against the child moving
itself (0 to tasks: no global lock), in 4 hierarchies, samples interleaved and spaced 100 ms
(so each write meets an idle rcu_sync). Run as root: python3 scripts/cgroup_self_move_experiment.py 60
Makes and removes sandboxd-exp-self-move/<n> cgroups."""
import os, time, statistics, sys
H = ["cpu", "memory", "pids", "freezer"]
base = "sandboxd-exp-self-move"
def mk(i):
    ds = []
    for h in H:
        d = f"/sys/fs/cgroup/{h}/{base}/{i}"
        os.makedirs(d, exist_ok=True); ds.append(d)
    return ds
def rm(ds):
    for d in ds:
        for _ in range(1000):
            try: os.rmdir(d); break
            except OSError: time.sleep(0.001)
def parent_way(i):
    ds = mk(i)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.read(r, 1); os._exit(0)
    t = time.perf_counter()
    for d in ds:
        with open(d + "/cgroup.procs", "w") as f: f.write(str(pid))
    dt = time.perf_counter() - t
    os.write(w, b"x"); os.waitpid(pid, 0); os.close(r); os.close(w); rm(ds)
    return dt
def child_way(i):
    ds = mk(i)
    fds = [os.open(d + "/tasks", os.O_WRONLY | os.O_CLOEXEC) for d in ds]
    r, w = os.pipe()
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        t0 = time.perf_counter()
        for fd in fds: os.write(fd, b"0")
        os.write(w, str(time.perf_counter() - t0).encode()); os._exit(0)
    inner = float(os.read(r, 100)); 
    dt = time.perf_counter() - t
    for fd in fds: os.close(fd)
    os.waitpid(pid, 0); os.close(r); os.close(w)
    # verify it was moved (pid gone, but check through a living child instead is overkill)
    rm(ds)
    return inner, dt
def fork_only():
    t = time.perf_counter(); pid = os.fork()
    if pid == 0: os._exit(0)
    os.waitpid(pid, 0); return time.perf_counter() - t
P, C, CI, F = [], [], [], []
n = int(sys.argv[1])
for i in range(n):
    time.sleep(0.1)
    P.append(parent_way(i))
    time.sleep(0.1)
    ci, c = child_way(i); C.append(c); CI.append(ci)
    F.append(fork_only())
for h in H:
    try: os.rmdir(f"/sys/fs/cgroup/{h}/{base}")
    except OSError as e: print(e)
ms = lambda xs: "median %.3f ms p10 %.3f p90 %.3f" % tuple(1e3*x for x in (statistics.median(xs), sorted(xs)[len(xs)//10], sorted(xs)[9*len(xs)//10]))
print("parent writes pid to cgroup.procs x4:", ms(P))
print("child writes 0 to tasks x4 (inside child):", ms(CI))
print("fork + child self-move + report:", ms(C))
print("fork+wait only:", ms(F))
