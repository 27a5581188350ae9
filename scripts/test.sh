#!/usr/bin/env bash
# Runs every test of sandboxd: Rust unit and integration tests (as root: they create
# real sandboxes), then the Inngest SDK conformance suite against a real server.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --locked -p sandboxd
cargo nextest run --workspace --locked --no-fail-fast --test-threads 2

if [ -f tests/inngest-sdk/package.json ]; then
    (cd tests/inngest-sdk && SANDBOXD_BIN="$OLDPWD/target/debug/sandboxd" npm test)
fi

# A short run of every fuzz target (FUZZ_SECONDS each; see scripts/fuzz.sh).
bash scripts/fuzz.sh
