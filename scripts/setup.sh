#!/usr/bin/env bash
# Installs what sandboxd and its tests need on a fresh Debian 12 machine, and builds it.
# Idempotent. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in util-linux iproute2 nftables libnftables1 bubblewrap e2fsprogs python3 bash coreutils procps docker-registry skopeo umoci apache2-utils; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
# runsc (the gVisor tier) from bookworm-backports (release 20240729): unlike bookworm's
# 20221219 it has --net-disconnect-ok, which lets a sandbox with egress be checkpointed
# (pause to disk, memory snapshots, forks). The CI tests expect it (SANDBOXD_CI).
backports="deb http://deb.debian.org/debian bookworm-backports main"
if ! grep -rqsF "$backports" /etc/apt/sources.list /etc/apt/sources.list.d/ \
    && ! grep -rqsE '^Suites:.*bookworm-backports' /etc/apt/sources.list.d/; then
    echo "$backports" >/etc/apt/sources.list.d/bookworm-backports.list
    apt-get update -qq
fi
runsc_flags="$(runsc flags 2>&1 || true)"
if [[ "$runsc_flags" != *-net-disconnect-ok* ]]; then
    # A runsc of another release may not restore memory images the installed one took:
    # no change while the default data dirs hold any (SANDBOXD_SETUP_FORCE_RUNSC=1 to
    # change it anyway; those sandboxes may then fail to wake).
    if command -v runsc >/dev/null && [ "${SANDBOXD_SETUP_FORCE_RUNSC:-}" != 1 ] \
        && ! images="$(bash scripts/gvisor-images-on-disk.sh ./.sandboxd "${SANDBOXD_DATA_DIR:-./.sandboxd}" /var/lib/sandboxd)"; then
        echo "setup.sh: not changing runsc ($(runsc --version 2>/dev/null | head -1)): gVisor sandboxes or memory snapshots are on disk, and another runsc may not restore them:" >&2
        echo "$images" >&2
        echo "Wake (or delete) them first, or set SANDBOXD_SETUP_FORCE_RUNSC=1." >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm-backports runsc
fi
# promtool and a real Prometheus for the monitoring tests (crates/sandboxd/tests/metrics*.rs).
dpkg -s prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
# Headless Chromium and its WebDriver for the web console's browser test (tests/console.rs).
for pkg in chromium chromium-driver; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

# The realistic test image (tests/images_debian.rs): a Debian minbase root with python3
# by mmdebstrap, built once per machine into /var/cache/sandboxd-test.
if ! dpkg -s mmdebstrap >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap
fi
bash scripts/debian-python-image.sh

if [ -f tests/inngest-sdk/package-lock.json ]; then
    (cd tests/inngest-sdk && npm ci --no-audit --no-fund --loglevel=error)
fi

# Schemathesis for scripts/schemathesis.sh, in its own virtualenv (Debian's Python is
# externally managed); scripts/test.sh finds it there.
venv=/opt/sandboxd-schemathesis
if [ ! -x "$venv/bin/schemathesis" ]; then
    if ! python3 -m venv "$venv" 2>/dev/null; then
        rm -rf "$venv"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install -q --disable-pip-version-check 'schemathesis>=4.32,<5'
fi

cargo build --release --locked -p sandboxd
