#!/usr/bin/env bash
# Side by side: scaledkv-server vs Redis 7 under redis-benchmark, on the
# same machine and medium, in one run.
#
# Installs Debian's redis-server and redis-tools, builds scaledkv-server, and
# runs scripts/compare_redis.py, which prints (and appends to
# bench-results/redis-*.md as it goes) the tables for BENCHMARKS.md.
#
# Environment: REPEATS (3), MEDIA ("/dev/shm <repo>/bench-data"), N (1000000),
# QUICK=1 for a small smoke run; see compare_redis.py.
#
# `scripts/compare-redis.sh pubsub` runs scripts/compare_pubsub.py instead:
# PUBLISH fan-out to 0, 1, 10 and 50 subscribers against Redis (SUBSCRIBERS,
# PIPELINE, N, REPEATS).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools
fi
command -v python3 >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3; }
cargo build --release -p scaledkv-server
if [ "${1:-}" = pubsub ]; then
    shift
    exec python3 scripts/compare_pubsub.py "$@"
fi
exec python3 scripts/compare_redis.py "$@"
