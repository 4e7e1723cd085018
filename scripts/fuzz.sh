#!/usr/bin/env bash
# Runs every libFuzzer target in fuzz/ for FUZZ_SECONDS each (default 60;
# CI's size), keeping the corpus in fuzz/corpus/<target> between runs and
# starting from the committed seeds in fuzz/seeds/<target> (a corpus merged
# down to the inputs that add coverage; refresh with
# `scripts/fuzz.sh --merge-seeds`).
# A crash, a timeout (20 s per input), a leak, a single allocation over
# 1 GiB or 3 GiB of RSS fails the run; the input is left in
# fuzz/artifacts/<target>/ (reproduce with `cargo +nightly fuzz run
# <target> <file>`). Long mode: FUZZ_SECONDS=3600 scripts/fuzz.sh, or one
# target: scripts/fuzz.sh engine_files.
#
# Needs a nightly toolchain (sanitizer flags) and cargo-fuzz, which it
# installs; without a nightly toolchain it prints a NOTICE and skips.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${FUZZ_SECONDS:-60}
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "NOTICE: no nightly toolchain (rustup toolchain install nightly): fuzzing skipped"
    exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install --locked cargo-fuzz
fi
merge=false
if [ "${1:-}" = "--merge-seeds" ]; then
    merge=true
    shift
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target" "seeds/$target"
    if $merge; then
        # Keeps in seeds/ the inputs of both directories that add coverage.
        echo "== merge fuzz/corpus/$target into fuzz/seeds/$target"
        cargo +nightly fuzz run "$target" "seeds/$target" "corpus/$target" -- \
            -merge=1 -max_len=4096 -timeout=20 -rss_limit_mb=3072 -malloc_limit_mb=1024 2>&1 | tail -n 2
        continue
    fi
    echo "== fuzz $target for ${seconds} s"
    log="artifacts/$target.log"
    mkdir -p artifacts
    if ! cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -max_len=4096 -timeout=20 \
        -rss_limit_mb=3072 -malloc_limit_mb=1024 -print_final_stats=1 >"$log" 2>&1; then
        tail -n 80 "$log"
        echo "fuzz $target failed: the input is in fuzz/artifacts/$target/, the log in fuzz/$log"
        exit 1
    fi
    grep -E '^(Done|stat::number_of_executed_units|stat::new_units_added)' "$log" || true
done
