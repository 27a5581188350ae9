#!/usr/bin/env bash
# Property-based run of Schemathesis against each dialect's OpenAPI document
# (docs/openapi/*.json), on a real `sandboxd serve` over a fresh data directory on a
# loopback port. Checks: no 5xx, every answer matches its documented schema, every
# status is documented. Afterwards every sandbox is deleted through the API, the server
# stopped, and the data directory removed only once nothing is mounted under it.
# Ends with "schemathesis: N passed, N failed" (one per document). Run as root.
#
# SANDBOXD_BIN: the server binary (default target/debug/sandboxd).
# SCHEMATHESIS: the schemathesis command (default `schemathesis` on PATH).
# ST_MAX_EXAMPLES: cases per operation and phase (default 40).
# ST_SECONDS: hard time limit of each document's run (default 90; a run takes about 10).
# ST_SEED: the random seed (default 1, so that a run is reproducible).
# ST_ARGS: more arguments for `schemathesis run` (e.g. `--report har`).
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${SANDBOXD_BIN:-target/debug/sandboxd}"
st="${SCHEMATHESIS:-schemathesis}"
examples="${ST_MAX_EXAMPLES:-40}"
seconds="${ST_SECONDS:-90}"
dialects=("${@:-inngest openrelay runzivo}")
read -r -a dialects <<<"${dialects[*]}"

work="$(mktemp -d /tmp/sandboxd-schemathesis.XXXXXX)"
key="st-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
url="http://127.0.0.1:${port}"
server=""

# The API helper: list and delete every sandbox (through the Inngest dialect, which
# lists every sandbox of the default workspace whatever dialect made it), then wait
# until none is left running.
api() {
    python3 - "$url" "$key" "$1" <<'EOF'
import json, sys, time, urllib.request, urllib.error
url, key, what = sys.argv[1:4]
def call(method, path, body=None):
    headers = {"Authorization": "Bearer " + key}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url + path, method=method, headers=headers, data=data)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            body = r.read()
            return r.status, json.loads(body) if body else None
    except urllib.error.HTTPError as e:
        return e.code, None
def sandboxes():
    out, cursor = [], None
    while True:
        q = "/v2/sandboxes?limit=250" + (f"&cursor={cursor}" if cursor else "")
        status, body = call("GET", q)
        if status != 200:
            raise SystemExit(f"list answered {status}")
        out += body["data"]
        cursor = body["page"].get("cursor")
        if not body["page"].get("hasMore") or not cursor:
            return out
if what == "ready":
    for _ in range(300):
        try:
            call("GET", "/v2/sandboxes")
            raise SystemExit(0)
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    raise SystemExit("the server did not start")
def spare(*operations, param, victim):
    # Operations that end or freeze a sandbox get their own, so that the others keep
    # reaching a running one.
    for op in operations:
        print(f'[[operations]]\ninclude-operation-id = "{op}"\nparameters = {{ "path.{param}" = "{victim}" }}')
def made(status, body, path):
    if status not in (200, 201) or body is None:
        raise SystemExit(f"setup: {path} answered {status}")
    return body
if what == "setup-inngest":
    sb = made(*call("POST", "/v2/sandboxes", {"name": "schemathesis", "vcpu": 1, "memoryMb": 256}), "create")["data"]["id"]
    # A process that has ended: waiting for it and following its output end at once.
    p = made(*call("POST", f"/v2/sandboxes/{sb}/processes", {"command": ["/bin/echo", "hi"]}), "process")["data"]["id"]
    snap = made(*call("POST", f"/v2/sandboxes/{sb}/snapshots", {"name": "schemathesis"}), "snapshot")["data"]["id"]
    # Following a live sandbox's logs never ends: the logs route reads an ended one.
    ended = made(*call("POST", "/v2/sandboxes", {"name": "schemathesis-ended", "vcpu": 1, "memoryMb": 256}), "create")["data"]["id"]
    call("DELETE", f"/v2/sandboxes/{ended}")
    for _ in range(600):
        if call("GET", f"/v2/sandboxes/{ended}")[1]["data"]["status"] == "TERMINATED":
            break
        time.sleep(0.1)
    print(f'"path.sandbox_id" = "{sb}"\n"path.process_id" = "{p}"\n"path.snapshot_id" = "{snap}"')
    print(f'[[operations]]\ninclude-operation-id = "streamSandboxLogs"\nparameters = {{ "path.sandbox_id" = "{ended}" }}')
    victim = made(*call("POST", "/v2/sandboxes", {"name": "schemathesis-victim", "vcpu": 1, "memoryMb": 256}), "create")["data"]["id"]
    spare("destroySandbox", "pauseSandbox", "resumeSandbox", param="sandbox_id", victim=victim)
    raise SystemExit(0)
if what == "setup-openrelay":
    sb = made(*call("POST", "/v1/sandboxes", {"template": "default"}), "create")["id"]
    print(f'"path.sandbox_id" = "{sb}"')
    victim = made(*call("POST", "/v1/sandboxes", {"template": "default"}), "create")["id"]
    spare("deleteSandbox", "pauseSandbox", "resumeSandbox", param="sandbox_id", victim=victim)
    raise SystemExit(0)
if what == "setup-runzivo":
    sb = made(*call("POST", "/v1/customer/tenants/default/sandboxes", {}), "create")["id"]
    print(f'"path.tenantId" = "default"\n"path.sandboxId" = "{sb}"')
    victim = made(*call("POST", "/v1/customer/tenants/default/sandboxes", {}), "create")["id"]
    spare("deleteSandbox", param="sandboxId", victim=victim)
    raise SystemExit(0)
live = lambda: [s for s in sandboxes() if s["status"] not in ("TERMINATED", "FAILED")]
for s in live():
    call("DELETE", "/v2/sandboxes/" + s["id"])
for _ in range(600):
    left = live()
    if not left:
        print("every sandbox deleted")
        raise SystemExit(0)
    time.sleep(0.5)
raise SystemExit(f"{len(left)} sandboxes still live")
EOF
}

cleanup() {
    local rc=$?
    if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
        api delete-all || rc=1
        kill -TERM "$server"
        wait "$server" || true
    fi
    if findmnt -rn -o TARGET | grep -qF "$work"; then
        echo "schemathesis: mounts left under $work:" >&2
        findmnt -rn -o TARGET | grep -F "$work" >&2
        exit 1
    fi
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT

SANDBOXD_DATA_DIR="$work/data" SANDBOXD_MASTER_KEY="$key" SANDBOXD_LISTEN="127.0.0.1:${port}" \
    SANDBOXD_NETWORK=none SANDBOXD_EXEC_KILL_GRACE_SECONDS=1 SANDBOXD_METRICS_LISTEN=none \
    SANDBOXD_DISK_MB_PER_SANDBOX=64 SANDBOXD_MAX_DISK_MB_PER_SANDBOX=256 \
    "$bin" serve >"$work/server.log" 2>&1 &
server=$!
api ready

passed=0
failed=0
for d in "${dialects[@]}"; do
    echo "=== schemathesis: $d"
    # Path parameters name a live sandbox (and process, snapshot) of the dialect and the
    # caller's own tenant, so that generated requests reach the handlers behind the
    # lookups; everything else in each request is generated.
    { echo "[parameters]"; api "setup-$d"; } >"$work/$d.toml"
    if timeout --kill-after=10 "$seconds" "$st" --no-color --config-file "$work/$d.toml" run \
        "docs/openapi/$d.json" --url "$url" \
        -H "Authorization: Bearer $key" \
        --checks not_a_server_error,response_schema_conformance,status_code_conformance \
        --max-examples "$examples" --phases examples,coverage,fuzzing \
        --request-timeout 60 --seed "${ST_SEED:-1}" --generation-database none ${ST_ARGS:-}; then
        passed=$((passed + 1))
    else
        echo "schemathesis: $d FAILED" >&2
        failed=$((failed + 1))
    fi
done
if [ "$failed" -ne 0 ]; then
    echo "--- server log (tail)" >&2
    tail -n 40 "$work/server.log" >&2
fi
echo "schemathesis: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
