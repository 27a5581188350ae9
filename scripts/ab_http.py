#!/usr/bin/env python3
"""A/B of sandboxd release binaries through HTTP (Inngest API): spaced create -> first
exec and the exec round trip, servers alternated per sample (random order), each sample
paired with an `unshare` / fork+exec baseline taken just before it. Run as root.

usage: ab_http.py NETWORK SAMPLES BIN[::ENV=VALUE...] [BIN...]
env: AB_SETTLE (s before sampling, 8), AB_ALL=1 (every sample), AB_EXECS=n (time n more
execs per sandbox), AB_DELAY (s between create and first exec), AB_STRACE=FILE (strace
-f the first server while sampling), AB_LOG (the servers' RUST_LOG; keep
sandboxd_server=info in it: the listening line is read from it), AB_ECHO=1 (their logs)."""
import http.client, json, os, random, shutil, socket, statistics, subprocess, sys, threading, time, uuid

def spawn_wait(argv):
    t = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, os.environ)
    _, st = os.waitpid(pid, 0)
    d = time.perf_counter() - t
    assert st == 0, argv
    return d

def unshare():
    return spawn_wait(["unshare", "--fork", "--pid", "--mount-proc", "/bin/true"])

def fork_exec():
    return spawn_wait(["/bin/true"])

class Server:
    def __init__(self, binary, network, extra_env=None):
        self.binary = binary
        self.dir = f"/tmp/sbab-{uuid.uuid4().hex[:10]}"
        self.key = f"bench-{uuid.uuid4().hex}"
        env = dict(os.environ, SANDBOXD_MASTER_KEY=self.key, SANDBOXD_NETWORK=network,
                   SANDBOXD_DISK_OVERCOMMIT="1000", NO_COLOR="1",
                   RUST_LOG=os.environ.get("AB_LOG", "warn,sandboxd_server=info"))
        env.update(extra_env or {})
        self.p = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", self.dir],
                                  env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        self.addr = None
        self.log = []
        for line in self.p.stderr:
            self.log.append(line)
            if "listening on " in line:
                self.addr = line.split("listening on ")[1].split()[0]
                break
        assert self.addr, "".join(self.log)
        echo = os.environ.get("AB_ECHO")
        def drain():
            for l in self.p.stderr:
                if echo:
                    sys.stderr.write(f"[{os.path.basename(os.path.dirname(binary))}] {l}")
        threading.Thread(target=drain, daemon=True).start()
        self.connect()

    def connect(self):
        host, port = self.addr.rsplit(":", 1)
        self.c = http.client.HTTPConnection(host, int(port))
        self.c.connect()
        self.c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, method, path, body=None):
        h = {"authorization": f"Bearer {self.key}", "host": "bench"}
        data = None
        if body is not None:
            data = json.dumps(body)
            h["content-type"] = "application/json"
        for attempt in range(2):
            try:
                self.c.request(method, path, body=data, headers=h)
                r = self.c.getresponse()
                raw = r.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.connect()
        try:
            return r.status, json.loads(raw)
        except Exception:
            return r.status, None

    def create(self):
        s, v = self.call("POST", "/v2/sandboxes", {"name": f"ab-{uuid.uuid4().hex}", "vcpu": 1, "memoryMb": 256})
        assert s == 201 and v["data"]["status"] == "RUNNING", (s, v)
        return v["data"]["id"]

    def exec_true(self, sid):
        s, v = self.call("POST", f"/v2/sandboxes/{sid}/exec", {"command": ["/bin/true"]})
        assert s == 200 and v["data"]["exitCode"] == 0, (s, v)

    def destroy(self, sid):
        s, v = self.call("DELETE", f"/v2/sandboxes/{sid}")
        assert s in (202, 204), (s, v)
        while self.call("GET", f"/v2/sandboxes/{sid}")[1]["data"]["status"] != "TERMINATED":
            time.sleep(0.01)

    def stop(self):
        self.p.terminate()
        self.p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

def med(xs):
    return statistics.median(xs) * 1e3

def main():
    network, n, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    def mk(spec):
        parts = spec.split("::")
        env = dict(p.split("=", 1) for p in parts[1:])
        s = Server(parts[0], network, env)
        s.label = spec
        return s
    servers = [mk(b) for b in bins]
    try:
        warm = {}
        for s in servers:
            warm[s] = s.create()
            s.exec_true(warm[s])
        time.sleep(float(os.environ.get("AB_SETTLE", "8")))
        res = {s: ([], []) for s in servers}
        rtt = {s: ([], []) for s in servers}
        split = {}
        more = {}
        if os.environ.get("AB_STRACE"):
            st = subprocess.Popen(["strace", "-f", "-tt", "-T", "-o", os.environ["AB_STRACE"], "-p", str(servers[0].p.pid)])
            time.sleep(1)
        for i in range(n):
            order = servers[:]
            random.shuffle(order)
            for s in order:
                time.sleep(0.15)
                s.connect()
                b = unshare()
                t = time.perf_counter()
                sid = s.create()
                tc = time.perf_counter() - t
                dl = float(os.environ.get("AB_DELAY", "0"))
                if dl:
                    time.sleep(dl)
                te = time.perf_counter()
                s.exec_true(sid)
                d = tc + time.perf_counter() - te
                res[s][0].append(d); res[s][1].append(b)
                split.setdefault(s, []).append((tc, d - tc))
                for k in range(int(os.environ.get("AB_EXECS", "0"))):
                    t2 = time.perf_counter(); s.exec_true(sid); more.setdefault((s, k), []).append(time.perf_counter() - t2)
                s.destroy(sid)
        if os.environ.get("AB_STRACE"):
            st.terminate(); st.wait()
        time.sleep(1)
        for i in range(n * 4):
            for s in servers:
                b = fork_exec()
                t = time.perf_counter()
                s.exec_true(warm[s])
                d = time.perf_counter() - t
                rtt[s][0].append(d); rtt[s][1].append(b)
        load = open("/proc/loadavg").read().split()[:3]
        for s in servers:
            c, cb = res[s]; e, eb = rtt[s]
            print(f"{s.label:<60} {network:6} spaced {med(c):6.2f}ms / unshare {med(cb):5.2f}ms = {med(c)/med(cb):4.2f}x"
                  f" | rtt {med(e):5.2f}ms / fork {med(eb):5.2f}ms = {med(e)/med(eb):4.2f}x  load {' '.join(load)}")
            print(f"   create {statistics.median([a for a,_ in split[s]])*1e3:.2f}ms first exec {statistics.median([b for _,b in split[s]])*1e3:.2f}ms")
            for k in range(int(os.environ.get("AB_EXECS", "0"))):
                print(f"   exec #{k+2}: {statistics.median(more[(s, k)])*1e3:.2f}ms")
            if os.environ.get("AB_ALL"):
                print("   samples", " ".join(f"{a*1e3:.1f}+{b*1e3:.1f}" for a,b in split[s]))
                print("   unshare", " ".join(f"{x*1e3:.1f}" for x in cb))
        for s in servers:
            s.destroy(warm[s])
    finally:
        for s in servers:
            s.stop()

if __name__ == "__main__":
    main()
