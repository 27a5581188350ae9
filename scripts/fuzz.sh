#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ briefly (FUZZ_SECONDS each, default 20).
# Only stable Rust is installed: RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass its -Z flags, and
# `-s none` skips the sanitizer (AddressSanitizer needs a nightly std); libFuzzer's
# coverage instrumentation (-Cpasses=sancov-module) works on stable.
# A longer run of one target:  FUZZ_SECONDS=3600 scripts/fuzz.sh openrelay_body
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-20}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install --locked cargo-fuzz
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list)
fi
cargo fuzz build -s none
for target in "${targets[@]}"; do
    echo "== fuzz $target (${seconds}s)"
    mkdir -p "corpus/$target"
    # Seeds under seeds/<target> are checked in; the grown corpus stays local.
    seeds=()
    [ -d "seeds/$target" ] && seeds=("seeds/$target")
    log="target/fuzz-$target.log"
    mkdir -p target
    # libFuzzer reports every new input; keep that in a log and show it only on failure.
    if ! cargo fuzz run -s none "$target" "corpus/$target" "${seeds[@]}" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
        tail -n 40 "$log"
        echo "fuzz target $target failed (full log: fuzz/$log)"
        exit 1
    fi
    grep -E "^stat::number_of_executed_units" "$log" | sed "s/^/   $target /" || true
done
