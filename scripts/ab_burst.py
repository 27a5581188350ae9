#!/usr/bin/env python3
"""A/B of sandboxd release binaries on bursts: for each round and binary (in turn), a fresh
egress server on a fresh data dir; one create -> exec -> destroy, then a burst of 20
concurrent create -> first exec (each on its own connection) once the server's metrics
report the warm pool full, then, once the pool that grew for it reports full, a second
burst. Prints each sample and the medians per binary. Run as root; the Python client's own
CPU is part of every burst (compare binaries with it, not with `sandboxd bench`).

usage: ab_burst.py ROUNDS BIN [BIN...]"""
import http.client, json, os, re, shutil, signal, socket, statistics, subprocess, sys, threading, time, urllib.request, uuid

BURST = 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary):
        self.dir = f"/tmp/sbab-{uuid.uuid4().hex[:10]}"
        os.makedirs(self.dir)
        self.port, self.metrics = free_port(), free_port()
        self.key = "ab-" + uuid.uuid4().hex
        env = dict(os.environ, SANDBOXD_MASTER_KEY=self.key, SANDBOXD_NETWORK="egress",
                   SANDBOXD_DISK_OVERCOMMIT="1000", SANDBOXD_CREATE_RATE_BURST="5000",
                   SANDBOXD_METRICS_LISTEN=f"127.0.0.1:{self.metrics}", RUST_LOG="warn", NO_COLOR="1")
        self.log = open(self.dir + ".log", "w")
        self.proc = subprocess.Popen([binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.dir],
                                     env=env, stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        self.headers = {"authorization": "Bearer " + self.key, "content-type": "application/json", "host": "ab"}
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit(f"{binary} did not listen; see {self.log.name}")

    def conn(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port)
        c.connect()
        return c

    def pool_full(self):
        while True:
            t = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/metrics").read().decode()
            ready = float(re.search(r'^sandboxd_warm_pool_ready\{tier="container"\} (\S+)', t, re.M).group(1))
            target = float(re.search(r'^sandboxd_warm_pool_target\{tier="container"\} (\S+)', t, re.M).group(1))
            if target > 0 and ready >= target:
                return int(target)
            time.sleep(0.02)

    def create_exec(self, c, made, answered):
        body = json.dumps({"name": "ab-" + uuid.uuid4().hex, "vcpu": 1, "memoryMb": 256})
        c.request("POST", "/v2/sandboxes", body, self.headers)
        r = c.getresponse(); v = json.loads(r.read())
        assert r.status == 201, v
        sid = v["data"]["id"]
        made.append(sid)
        c.request("POST", f"/v2/sandboxes/{sid}/exec", json.dumps({"command": ["/bin/true"]}), self.headers)
        r = c.getresponse(); v = json.loads(r.read())
        assert r.status == 200, v
        answered.append(sid)

    def destroy(self, c, ids):
        for sid in ids:
            c.request("DELETE", f"/v2/sandboxes/{sid}", headers=self.headers)
            c.getresponse().read()

    def burst(self):
        conns = [self.conn() for _ in range(BURST)]
        made, answered = [], []
        threads = [threading.Thread(target=self.create_exec, args=(c, made, answered)) for c in conns]
        t = time.perf_counter()
        for th in threads: th.start()
        for th in threads: th.join()
        took = time.perf_counter() - t
        self.destroy(conns[0], made)
        assert len(answered) == BURST, f"{len(answered)} of {BURST} create -> exec answered"
        for c in conns: c.close()
        return took

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        os.remove(self.log.name)


def sample(binary):
    s = Server(binary)
    try:
        c = s.conn(); made = []
        s.create_exec(c, made, []); s.destroy(c, made); c.close()
        s.pool_full()
        first = s.burst()
        s.pool_full()
        second = s.burst()
        return first, second
    finally:
        s.stop()


def main():
    rounds, bins = int(sys.argv[1]), sys.argv[2:]
    got = {b: ([], []) for b in bins}
    for r in range(rounds):
        for b in bins:
            first, second = sample(b)
            got[b][0].append(first); got[b][1].append(second)
            print(f"round {r}: {b}: first burst {first * 1e3:.1f} ms, second {second * 1e3:.1f} ms", flush=True)
            time.sleep(2)
    for b in bins:
        f, s = got[b]
        print(f"{b}: medians first {statistics.median(f) * 1e3:.1f} ms, second {statistics.median(s) * 1e3:.1f} ms ({rounds} rounds)")


if __name__ == "__main__":
    main()
