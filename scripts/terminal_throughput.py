#!/usr/bin/env python3
"""Terminal throughput of sandboxd release binaries: a `cat` of SIZE bytes of base64 on the
web console's terminal (a WebSocket bridged to a PTY in the sandbox through the agent,
the same bridge as Runzivo's terminal), read as fast as this client can, servers
alternated per sample, beside a baseline taken just before each sample: the same `cat`
onto a PTY on the host, read by this script. Every sample checks the bytes' sha256
against the one computed inside the sandbox. Run as root; stdlib only.

usage: terminal_throughput.py SAMPLES SIZE_MIB BIN [BIN...]
prints per binary the median MiB/s and its ratio to the host PTY baseline."""
import base64, hashlib, http.client, json, os, pty, random, socket, statistics, struct, subprocess, sys, time, tty
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_http import Server  # noqa: E402  (a `serve` child and its Inngest API)

BEGIN, DONE = b"--BEGIN--", b"--DONE--"


def http_req(addr, method, path, headers=None, body=""):
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port))
    c.request(method, path, body=body, headers=dict(headers or {}, host="tp"))
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.getheaders(), data


def sign_in(srv):
    url = f"http://{srv.addr}"
    out = subprocess.run([srv.binary, "console", "link", "--data-dir", srv.dir, "--url", url],
                         check=True, capture_output=True, text=True).stdout.strip()
    status, headers, _ = http_req(srv.addr, "GET", out[len(url):])
    assert status == 200, status
    cookie = dict((k.lower(), v) for k, v in headers)["set-cookie"].split(";")[0]
    _, _, body = http_req(srv.addr, "GET", "/console/api/session", {"cookie": cookie})
    return cookie, json.loads(body)["csrf_token"]


class Ws:
    """A minimal WebSocket client: binary frames out (masked), frames in."""

    def __init__(self, addr, path, cookie):
        host, port = addr.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)))
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET {path} HTTP/1.1\r\nHost: tp\r\nUpgrade: websocket\r\n"
                        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                        f"Sec-WebSocket-Version: 13\r\nCookie: {cookie}\r\n\r\n").encode())
        self.f = self.s.makefile("rb", buffering=1 << 20)
        status = self.f.readline()
        assert b" 101 " in status, status
        while self.f.readline() not in (b"\r\n", b""):
            pass

    def send(self, data):
        mask = os.urandom(4)
        n = len(data)
        head = bytes([0x82]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n))
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.s.sendall(head + mask + masked)

    def recv(self):
        """(opcode, payload); (None, b"") at EOF."""
        h = self.f.read(2)
        if len(h) < 2:
            return None, b""
        n = h[1] & 0x7F
        if n == 126:
            n = struct.unpack(">H", self.f.read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self.f.read(8))[0]
        return h[0] & 0x0F, self.f.read(n)

    def close(self):
        self.s.close()


def read_until_done(recv):
    """Reads frames until DONE follows BEGIN; returns (bytes between, seconds from BEGIN
    to DONE, frames, largest frame)."""
    buf = bytearray()
    begin = None
    t0 = None
    frames = 0
    largest = 0
    scan = 0
    while True:
        op, d = recv()
        assert op is not None, "closed before DONE"
        if op != 2:
            continue
        frames += 1
        largest = max(largest, len(d))
        buf += d
        if begin is None:
            i = buf.find(BEGIN)
            if i >= 0:
                begin = i + len(BEGIN)
                t0 = time.perf_counter()
                scan = begin
                frames = 0
            continue
        j = buf.find(DONE, max(scan, begin))
        if j >= 0:
            return bytes(buf[begin:j]), time.perf_counter() - t0, frames, largest
        scan = max(begin, len(buf) - len(DONE))


def sample(srv, cookie, csrf, sid, size):
    status, _, body = http_req(srv.addr, "POST", f"/console/api/sandboxes/{sid}/terminal/tickets",
                               {"cookie": cookie, "x-csrf-token": csrf})
    assert status == 201, body
    ticket = json.loads(body)["ticket"]
    ws = Ws(srv.addr, f"/console/api/sandboxes/{sid}/terminal?ticket={ticket}&cols=200&rows=50", cookie)
    raw = size * 3 // 4
    script = (f"stty raw -echo; head -c {raw} /dev/urandom | base64 > /tmp/t; "
              "printf -- '--%s--' BEGIN; cat /tmp/t; printf -- '--%s--' DONE; exit\n")
    ws.send(script.encode())
    got, secs, frames, largest = read_until_done(ws.recv)
    ws.close()
    s, v = srv.call("POST", f"/v2/sandboxes/{sid}/exec", {"command": ["/bin/sh", "-c", "sha256sum /tmp/t"]})
    assert s == 200, v
    inside = base64.b64decode(v["data"]["stdout"]).split()[0].decode()
    assert hashlib.sha256(got).hexdigest() == inside, f"bytes differ ({len(got)} read)"
    return len(got) / secs / 2**20, frames, largest


def host_pty(size):
    """The same cat onto a host PTY (raw), read here in 64 KiB reads: MiB/s."""
    path = "/tmp/tp-host-t"
    with open(path, "wb") as f:
        f.write(base64.encodebytes(os.urandom(size * 3 // 4)))
    total = os.path.getsize(path)
    master, slave = pty.openpty()
    tty.setraw(slave)
    t = time.perf_counter()
    p = subprocess.Popen(["cat", path], stdout=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    n = 0
    while n < total:
        n += len(os.read(master, 65536))
    secs = time.perf_counter() - t
    p.wait()
    os.close(master)
    os.unlink(path)
    return total / secs / 2**20


def main():
    samples, size = int(sys.argv[1]), int(sys.argv[2]) * 2**20
    bins = sys.argv[3:]
    servers = []
    for b in bins:
        srv = Server(b, "none")
        cookie, csrf = sign_in(srv)
        servers.append((srv, cookie, csrf, srv.create()))
    rates = {b: [] for b in bins}
    base = []
    extra = {}
    try:
        for _ in range(samples):
            order = list(range(len(bins)))
            random.shuffle(order)
            for i in order:
                srv, cookie, csrf, sid = servers[i]
                base.append(host_pty(size))
                r, frames, largest = sample(srv, cookie, csrf, sid, size)
                rates[bins[i]].append(r)
                extra[bins[i]] = (frames, largest)
    finally:
        for srv, _, _, sid in servers:
            try:
                srv.destroy(sid)
            finally:
                srv.stop()
    load = open("/proc/loadavg").read().split()[:3]
    hb = statistics.median(base)
    print(f"load {' '.join(load)}; {samples} samples of {size >> 20} MiB; host PTY baseline median {hb:.1f} MiB/s")
    for b in bins:
        m = statistics.median(rates[b])
        frames, largest = extra[b]
        print(f"{b}: median {m:.1f} MiB/s (min {min(rates[b]):.1f}, max {max(rates[b]):.1f}), "
              f"{m / hb:.2f}x host PTY; last sample {frames} frames, largest {largest} B")


if __name__ == "__main__":
    main()
