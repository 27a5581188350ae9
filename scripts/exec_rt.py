#!/usr/bin/env python3
"""Where an exec round trip's time goes, against real `sandboxd serve` processes.

  exec_rt.py ab A B ROUNDS     two servers (binaries A and B) at once, one sandbox each;
                               execs of /bin/true alternated between them (random order
                               each round) beside a fork+exec baseline: medians, B-A, wins
  exec_rt.py split BIN ROUNDS  one server: the exec through it (HTTP over TCP) against the
                               same exec sent straight to the sandbox's agent (HTTP over
                               its Unix socket) and fork+exec, alternated
  exec_rt.py cpu BIN N         the server's CPU time, context switches and migrations per
                               exec (perf stat on the server around N execs)
  exec_rt.py relay BIN ROUNDS  split's rows and a fourth: the agent's exec through a byte
                               relay (scripts/exec_relay.c, built with gcc), the cost of a
                               process in the middle that does nothing else
  exec_rt.py kinds BIN N       the server's CPU, context switches, migrations and futex
                               calls per request: a GET, a POST refused after its body is
                               read (no agent call), an exec (perf stat, N of each)
  exec_rt.py first BIN ROUNDS  creates 150 ms apart, each followed by three execs: medians
                               of the create and of the first, second and third exec

Each request goes out in one write on a kept connection (as the benchmark's client
does). Servers get their own temporary data directories (default egress network, or
SANDBOXD_NETWORK), are stopped with SIGTERM after their sandboxes are destroyed, and
their directories removed only when nothing is mounted under them. Run as root, with
nothing else of sandboxd running; timings are for comparing, never for asserting.
"""
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

KEY = "sk_exec_rt_" + "x" * 32
NETWORK = os.environ.get("SANDBOXD_NETWORK", "egress")


class Conn:
    """HTTP/1.1 on one kept connection, a request per write."""

    def __init__(self, sock):
        self.s, self.buf = sock, b""

    def call(self, method, path, body=None, auth=True):
        data = json.dumps(body).encode() if body is not None else b""
        head = f"{method} {path} HTTP/1.1\r\nHost: x\r\n"
        if auth:
            head += f"Authorization: Bearer {KEY}\r\n"
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        self.s.sendall(head.encode() + data)
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.recv()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ")[1])
        length = re.search(rb"(?i)content-length: (\d+)", head)
        if status in (204, 304):
            out = b""
        elif length:
            n = int(length.group(1))
            while len(self.buf) < n:
                self.buf += self.recv()
            out, self.buf = self.buf[:n], self.buf[n:]
        else:  # chunked
            out = b""
            while True:
                while b"\r\n" not in self.buf:
                    self.buf += self.recv()
                size, self.buf = self.buf.split(b"\r\n", 1)
                size = int(size.split(b";")[0], 16)
                while len(self.buf) < size + 2:
                    self.buf += self.recv()
                out, self.buf = out + self.buf[:size], self.buf[size + 2:]
                if size == 0:
                    break
        return status, json.loads(out or b"null")

    def recv(self):
        chunk = self.s.recv(65536)
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        return chunk


class Server:
    """A `sandboxd serve` of binary `exe` with a sandbox of its own (`id`); closed (every
    sandbox of it destroyed, server stopped, directory removed) also when its start fails
    part-way."""

    def __init__(self, exe):
        self.p, self.http, self.id, self.addr = None, None, None, None
        self.dir = tempfile.mkdtemp(prefix="exec-rt-", dir="/tmp")
        try:
            self.start(exe)
        except BaseException:
            self.close()
            raise

    def start(self, exe):
        env = dict(os.environ, SANDBOXD_MASTER_KEY=KEY, SANDBOXD_NETWORK=NETWORK,
                   SANDBOXD_DISK_OVERCOMMIT="1000", SANDBOXD_METRICS_LISTEN="none",
                   RUST_LOG="warn,sandboxd_server=info", NO_COLOR="1")
        # A session of its own: a Ctrl-C here reaches this script only, whose cleanup
        # then destroys the sandbox before stopping the server.
        self.p = subprocess.Popen([exe, "serve", "--listen", "127.0.0.1:0", "--data-dir", self.dir],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        for line in self.p.stderr:
            m = re.search(r"listening on (\S+)", line)
            if m:
                host, port = m.group(1).rsplit(":", 1)
                self.addr = (host, int(port))
                break
        if self.addr is None:
            raise RuntimeError(f"{exe} serve exited before listening")
        threading.Thread(target=lambda: [None for _ in self.p.stderr], daemon=True).start()
        self.http = self.connect()
        status, v = self.http.call("POST", "/v2/sandboxes", {"name": "exec-rt", "vcpu": 1, "memoryMb": 256})
        if status != 201:
            raise RuntimeError(f"create: {status} {v}")
        self.id = v["data"]["id"]

    def connect(self, timeout=None):
        sock = socket.create_connection(self.addr, timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return Conn(sock)

    def exec_true(self):
        t = time.perf_counter()
        status, v = self.http.call("POST", f"/v2/sandboxes/{self.id}/exec", {"command": ["/bin/true"]})
        took = time.perf_counter() - t
        if status != 200 or v["data"]["exitCode"] != 0:
            raise RuntimeError(f"exec: {status} {v}")
        return took

    def agent(self):
        """A connection straight to the sandbox's agent."""
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(f"{self.dir}/sandboxes/{self.id}/agent.sock")
        return agent_exec(Conn(sock))

    def alive(self, http):
        """Ids of the server's sandboxes not TERMINATED (every page of the list)."""
        ids, cursor = [], None
        while True:
            path = "/v2/sandboxes?limit=250" + (f"&cursor={cursor}" if cursor else "")
            status, v = http.call("GET", path)
            if status != 200:
                raise RuntimeError(f"listing sandboxes: {status} {v}")
            ids += [sb["id"] for sb in v["data"] if sb["status"] != "TERMINATED"]
            cursor = (v.get("page") or {}).get("cursor")
            if not cursor:
                return ids

    def destroy(self, ids):
        """Destroys sandboxes `ids` on a fresh connection (a kept one may be mid-answer)
        and waits until each is TERMINATED (30 s at most)."""
        http = self.connect(timeout=30)
        for sid in ids:
            status, v = http.call("DELETE", f"/v2/sandboxes/{sid}")
            if status not in (200, 202, 204):
                raise RuntimeError(f"destroying sandbox {sid}: {status} {v}")
        for sid in ids:
            for _ in range(600):
                status, v = http.call("GET", f"/v2/sandboxes/{sid}")
                if status == 200 and isinstance(v, dict) and v["data"]["status"] == "TERMINATED":
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError(f"sandbox {sid} did not end in 30 s")

    def close(self):
        """Destroys every sandbox of the server (not only its own: a mode that made more
        and failed half-way leaves none running), stops the server, removes the directory
        if nothing is mounted under it."""
        # Nothing made yet (the start's create is the first): nothing to destroy.
        ended = self.id is None
        try:
            if self.p and self.p.poll() is None and self.addr:
                self.destroy(self.alive(self.connect(timeout=30)))
                ended = True
        except Exception as e:
            print(f"destroying the sandboxes of {self.dir}: {e}", file=sys.stderr)
        finally:
            if self.p and self.p.poll() is None:
                self.p.terminate()
                try:
                    self.p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    print(f"server {self.p.pid} did not stop in 60 s", file=sys.stderr)
            with open("/proc/self/mounts") as mounts:
                mounted = self.dir in mounts.read()
            if mounted or not ended:
                print(f"left {self.dir}: sandboxes not destroyed or still mounted; "
                      f"start a server on it and delete them", file=sys.stderr)
            else:
                shutil.rmtree(self.dir, ignore_errors=True)


def agent_exec(conn):
    """A timed exec of /bin/true in the agent protocol on `conn` (what the server sends
    for an Inngest exec of it: its 30 s default timeout, 4 MiB output cap)."""
    def exec_true():
        t = time.perf_counter()
        status, v = conn.call("POST", "/v1/exec", {"argv": ["/bin/true"], "timeout_ms": 30000,
                                                   "max_output_bytes": 4 << 20}, auth=False)
        took = time.perf_counter() - t
        if status != 200 or v["exit_code"] != 0:
            raise RuntimeError(f"agent exec: {status} {v}")
        return took
    return exec_true


def fork_exec():
    t = time.perf_counter()
    subprocess.run(["/bin/true"], check=True)
    return time.perf_counter() - t


def ms(samples):
    return statistics.median(samples) * 1e3


def close_all(servers):
    for s in servers:
        try:
            s.close()
        except Exception as e:
            print(f"closing a server: {e}", file=sys.stderr)


def ab(a, b, rounds):
    servers = []
    try:
        for exe in (a, b):
            servers.append(Server(exe))
        time.sleep(3)  # the warm pools refill after the creates
        for _ in range(30):
            for s in servers:
                s.exec_true()
        times, base = ([], []), []
        for _ in range(rounds):
            base.append(fork_exec())
            order = [0, 1]
            random.shuffle(order)
            for i in order:
                times[i].append(servers[i].exec_true())
        ma, mb, mbase = ms(times[0]), ms(times[1]), ms(base)
        wins = sum(y < x for x, y in zip(*times))
        print(f"A {ma:.3f} ms  B {mb:.3f} ms  B-A {mb - ma:+.3f} ms  B faster in {wins}/{rounds}  "
              f"fork+exec {mbase:.3f} ms  A/base {ma / mbase:.2f}  B/base {mb / mbase:.2f}")
    finally:
        close_all(servers)


def split(exe, rounds):
    server = None
    try:
        server = Server(exe)
        time.sleep(3)
        agent = server.agent()
        for _ in range(30):
            server.exec_true()
            agent()
        through, direct, base = [], [], []
        for _ in range(rounds):
            base.append(fork_exec())
            pair = [(server.exec_true, through), (agent, direct)]
            random.shuffle(pair)
            for f, samples in pair:
                samples.append(f())
        print(f"through the server {ms(through):.3f} ms  straight to the agent {ms(direct):.3f} ms  "
              f"fork+exec {ms(base):.3f} ms  (server {ms(through) - ms(direct):+.3f}, "
              f"agent {ms(direct) - ms(base):+.3f})")
    finally:
        if server:
            server.close()


def relay(exe, rounds):
    """The exec through the server, through a byte relay to the agent, straight to the
    agent, and fork+exec, alternated in random order each round."""
    server, relayer, build = None, None, tempfile.mkdtemp(prefix="exec-relay-", dir="/tmp")
    try:
        binary = os.path.join(build, "exec_relay")
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "exec_relay.c")
        subprocess.run(["gcc", "-O2", "-o", binary, source], check=True)
        server = Server(exe)
        time.sleep(3)
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        relayer = subprocess.Popen([binary, str(port), f"{server.dir}/sandboxes/{server.id}/agent.sock"])
        for _ in range(100):
            try:
                sock = socket.create_connection(("127.0.0.1", port))
                break
            except ConnectionRefusedError:
                time.sleep(0.01)
        else:
            raise RuntimeError("the relay did not listen")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rows = {"server": server.exec_true, "relay": agent_exec(Conn(sock)), "agent": server.agent(),
                "fork+exec": fork_exec}
        for _ in range(30):
            for f in rows.values():
                f()
        samples = {name: [] for name in rows}
        for _ in range(rounds):
            names = list(rows)
            random.shuffle(names)
            for name in names:
                samples[name].append(rows[name]())
        m = {name: ms(v) for name, v in samples.items()}
        print("  ".join(f"{name} {v:.3f} ms" for name, v in m.items()))
        print(f"a relay in the middle {m['relay'] - m['agent']:+.3f} ms; the server beyond a relay "
              f"{m['server'] - m['relay']:+.3f} ms; the agent beyond fork+exec {m['agent'] - m['fork+exec']:+.3f} ms")
    finally:
        if relayer:
            relayer.kill()
            relayer.wait()
        if server:
            server.close()
        shutil.rmtree(build, ignore_errors=True)


def per_request(server, n, request, events=("task-clock", "context-switches", "cpu-migrations")):
    """`perf stat` of the server around `n` calls of `request`: (ms per call, [(event,
    per call, unit)]). The counts include the server's idle upkeep over the half second
    perf is given to attach (a few µs per call at n = 1000)."""
    stat = subprocess.Popen(["perf", "stat", "-x", ",", "-e", ",".join(events), "-p", str(server.p.pid)],
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(0.5)
        t = time.perf_counter()
        for _ in range(n):
            request()
        took = time.perf_counter() - t
    finally:
        stat.send_signal(signal.SIGINT)
        try:
            out = stat.communicate(timeout=60)[1]
        except subprocess.TimeoutExpired:
            stat.kill()
            out = stat.communicate()[1]
    figures = {}
    for line in out.strip().splitlines():
        f = line.split(",")
        try:
            figures[f[2]] = (float(f[0]) / n, f[1])
        except (IndexError, ValueError):
            pass
    missing = [e for e in events if e not in figures]
    if missing:
        raise RuntimeError(f"perf stat counted no {', '.join(missing)}: {out.strip()}")
    return took / n * 1e3, [(e, *figures[e]) for e in events]


def counted(figures):
    return ", ".join(f"{event} {v:.3f}{' ' + unit if unit else ''}" for event, v, unit in figures)


@contextlib.contextmanager
def warmed(exe):
    """A server of `exe` whose pool has refilled and whose sandbox has run 50 execs."""
    server = Server(exe)
    try:
        time.sleep(3)
        for _ in range(50):
            server.exec_true()
        yield server
    finally:
        server.close()


def cpu(exe, n):
    with warmed(exe) as server:
        each, figures = per_request(server, n, server.exec_true)
        print(f"{n} execs, {each:.3f} ms each; per exec: {counted(figures)}")


def kinds(exe, n):
    """The server's CPU, context switches, migrations and futex calls per request, for a
    GET of the sandbox, a POST whose body is read and refused (no agent call), and an
    exec: what the agent call adds, and what reading a body adds."""
    with warmed(exe) as server:
        path = f"/v2/sandboxes/{server.id}"

        def refused():
            status, v = server.http.call("POST", path + "/exec", {"command": ["relative"]})
            if status != 400:
                raise RuntimeError(f"refused exec: {status} {v}")

        def get():
            status, v = server.http.call("GET", path)
            if status != 200:
                raise RuntimeError(f"GET: {status} {v}")

        rows = {"GET": get, "POST refused": refused, "exec": server.exec_true}
        events = ("task-clock", "context-switches", "cpu-migrations", "syscalls:sys_enter_futex")
        for name, request in rows.items():
            each, figures = per_request(server, n, request, events)
            print(f"{name:13s} {each:.3f} ms each; per request: {counted(figures)}")


def first(exe, rounds):
    """Creates (150 ms apart) each followed by three execs: the medians of the create and
    of each exec, the first an exec of a sandbox just made. Each sandbox is destroyed
    (and waited for) before the next create; any left by a failure, when the server is
    closed."""
    with warmed(exe) as server:
        rows = {"create": [], "1st exec": [], "2nd exec": [], "3rd exec": []}
        for _ in range(rounds):
            time.sleep(0.15)
            t = time.perf_counter()
            status, v = server.http.call("POST", "/v2/sandboxes",
                                         {"name": "exec-rt-first", "vcpu": 1, "memoryMb": 256})
            rows["create"].append(time.perf_counter() - t)
            if status != 201:
                raise RuntimeError(f"create: {status} {v}")
            sid = v["data"]["id"]
            for name in ("1st exec", "2nd exec", "3rd exec"):
                t = time.perf_counter()
                status, v = server.http.call("POST", f"/v2/sandboxes/{sid}/exec",
                                             {"command": ["/bin/true"]})
                rows[name].append(time.perf_counter() - t)
                if status != 200 or v["data"]["exitCode"] != 0:
                    raise RuntimeError(f"exec: {status} {v}")
            server.destroy([sid])
        print("  ".join(f"{name} {ms(v):.3f} ms" for name, v in rows.items()))


if __name__ == "__main__":
    # A SIGTERM ends the script through its cleanup (the `finally` blocks) too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if len(sys.argv) < 4 or sys.argv[1] not in ("ab", "split", "cpu", "relay", "kinds", "first"):
        sys.exit(__doc__)
    mode = sys.argv[1]
    if mode == "ab":
        if len(sys.argv) != 5:
            sys.exit(__doc__)
        ab(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif mode == "split":
        split(sys.argv[2], int(sys.argv[3]))
    elif mode == "relay":
        relay(sys.argv[2], int(sys.argv[3]))
    elif mode == "kinds":
        kinds(sys.argv[2], int(sys.argv[3]))
    elif mode == "first":
        first(sys.argv[2], int(sys.argv[3]))
    else:
        cpu(sys.argv[2], int(sys.argv[3]))
