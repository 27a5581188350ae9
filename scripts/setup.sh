#!/usr/bin/env bash
# Installs what sandboxd and its tests need on a fresh Debian 12 machine, and builds it.
# Idempotent. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in util-linux iproute2 nftables e2fsprogs python3 bash coreutils procps docker-registry skopeo umoci runsc; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

if [ -f tests/inngest-sdk/package-lock.json ]; then
    (cd tests/inngest-sdk && npm ci --no-audit --no-fund --loglevel=error)
fi

cargo build --release --locked -p sandboxd
