#!/usr/bin/env bash
# Runs every test of sandboxd: a short run of every fuzz target, the Rust unit and
# integration tests (as root: they create real sandboxes), the Inngest SDK conformance
# suite against a real server (container tier, then gVisor tier), then a Schemathesis run against each dialect's OpenAPI
# document (scripts/schemathesis.sh; SCHEMATHESIS names the command, by default the one
# scripts/setup.sh installs). What the run left on the machine (scripts/leftovers.sh:
# cgroups, mounts, loop devices, network namespaces, nft tables, temp dirs, processes
# that were not there before the Rust tests) is printed ("leftovers: …") and counted as
# one failed test (SANDBOXD_LEFTOVERS_FAIL=0 only reports it; see README, "Leftovers
# guard"). Ends with one "N passed, N
# failed" line.
set -euo pipefail
cd "$(dirname "$0")/.."

# A short run of every fuzz target (FUZZ_SECONDS each; see scripts/fuzz.sh).
bash scripts/fuzz.sh

cargo build --locked -p sandboxd
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
status=0
# The machine's state before the tests (scripts/leftovers.sh): what is new after the
# whole suite is a leftover.
bash scripts/leftovers.sh snapshot "$logs/before"
# The tests' sandboxes are admitted against the free space of the disk under /tmp (their
# data dirs): a shortage there fails them with CapacityExhausted, so the log says how much
# there was.
echo "disk: $(df -BM --output=avail /tmp | tail -1 | tr -d ' ') free under /tmp before the Rust tests"
cargo nextest run --workspace --locked --no-fail-fast --test-threads 2 2>&1 \
    | tee "$logs/rust.log" || status=1

if [ -f tests/inngest-sdk/package.json ]; then
    (cd tests/inngest-sdk && SANDBOXD_BIN="$OLDPWD/target/debug/sandboxd" npm test) 2>&1 \
        | tee "$logs/node.log" || status=1
    # The same suite against a server whose default tier is gVisor (scripts/setup.sh
    # installs runsc; without it this run is counted as failed). SANDBOXD_RUNSC, when set,
    # names the runsc the server uses, as it does for the server.
    if [ -x "${SANDBOXD_RUNSC:-}" ] || { [ -z "${SANDBOXD_RUNSC:-}" ] && command -v runsc >/dev/null; }; then
        (cd tests/inngest-sdk && SANDBOXD_ISOLATION=gvisor \
            SANDBOXD_BIN="$OLDPWD/target/debug/sandboxd" npm test) 2>&1 \
            | tee "$logs/node-gvisor.log" || status=1
    else
        echo "inngest-sdk on gVisor: runsc not installed; counted as failed" \
            | tee "$logs/node-gvisor.log"
        printf '# pass 0\n# fail 1\n' >>"$logs/node-gvisor.log"
        status=1
    fi
fi

# scripts/setup.sh installs it in its own virtualenv.
export SCHEMATHESIS="${SCHEMATHESIS:-/opt/sandboxd-schemathesis/bin/schemathesis}"
if command -v "$SCHEMATHESIS" >/dev/null; then
    SANDBOXD_BIN=target/debug/sandboxd bash scripts/schemathesis.sh 2>&1 \
        | tee "$logs/schemathesis.log" || status=1
else
    echo "schemathesis: not installed (scripts/setup.sh installs it); counted as failed" \
        | tee "$logs/schemathesis.log"
    echo "schemathesis: 0 passed, 1 failed" >>"$logs/schemathesis.log"
    status=1
fi

echo "disk: $(df -BM --output=avail /tmp | tail -1 | tr -d ' ') free under /tmp after the tests"

# Leftovers of the whole run (Rust, SDK and Schemathesis): a second look after a few
# seconds lets a process that is just exiting go.
leftovers_failed=0
if ! bash scripts/leftovers.sh compare "$logs/before" >/dev/null; then
    sleep 5
    if ! bash scripts/leftovers.sh compare "$logs/before" | tee "$logs/leftovers.log"; then
        if [ "${SANDBOXD_LEFTOVERS_FAIL:-1}" != 0 ]; then
            leftovers_failed=1
            status=1
        else
            echo "leftovers: reported, not counted (SANDBOXD_LEFTOVERS_FAIL=0)"
        fi
    fi
fi

rust_passed=$(sed -nE 's/.*Summary .* tests run: ([0-9]+) passed.*/\1/p' "$logs/rust.log" | tail -1)
rust_failed=$(sed -nE 's/.*Summary .* ([0-9]+) failed.*/\1/p' "$logs/rust.log" | tail -1)
node_passed=$(sed -nE 's/^# pass ([0-9]+)$/\1/p' "$logs/node.log" 2>/dev/null | tail -1)
node_failed=$(sed -nE 's/^# fail ([0-9]+)$/\1/p' "$logs/node.log" 2>/dev/null | tail -1)
gv_passed=$(sed -nE 's/^# pass ([0-9]+)$/\1/p' "$logs/node-gvisor.log" 2>/dev/null | tail -1)
gv_failed=$(sed -nE 's/^# fail ([0-9]+)$/\1/p' "$logs/node-gvisor.log" 2>/dev/null | tail -1)
node_passed=$(( ${node_passed:-0} + ${gv_passed:-0} ))
node_failed=$(( ${node_failed:-0} + ${gv_failed:-0} ))
st_passed=$(sed -nE 's/^schemathesis: ([0-9]+) passed, ([0-9]+) failed$/\1/p' "$logs/schemathesis.log" | tail -1)
st_failed=$(sed -nE 's/^schemathesis: ([0-9]+) passed, ([0-9]+) failed$/\2/p' "$logs/schemathesis.log" | tail -1)
passed=$(( ${rust_passed:-0} + ${node_passed:-0} + ${st_passed:-0} ))
failed=$(( ${rust_failed:-0} + ${node_failed:-0} + ${st_failed:-0} + leftovers_failed ))
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
    failed=1 # a runner failed without a countable test failure (build error, crash)
fi
echo "${passed} passed, ${failed} failed"
exit "$status"
