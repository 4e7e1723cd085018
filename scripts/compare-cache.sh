#!/usr/bin/env bash
# Caches under the same memory limit: scaledkv-server (--maxmemory,
# allkeys-lru, every SET durable) against memcached (-m) and Redis 7
# (maxmemory, allkeys-lru, no persistence), through each protocol, with
# `scaledkv-bench cache` (a look-aside cache's GET, SET on a miss, zipfian
# keys). Prints hit ratio, operations/s, GET p99, server CPU per operation
# and resident memory; appends the tables to bench-results/cache-*.md.
#
# Installs Debian's redis-server, redis-tools and memcached, builds
# scaledkv-server and scaledkv-bench, then runs scripts/compare_cache.py.
# Environment: REPEATS (3), KEYS (500000), VALUE (1000), WARMUP (500000),
# OPERATIONS (500000), THREADS (4), LIMIT_MB ("64 256"), MEDIUM (/dev/shm),
# DURABILITY (sync), CONFIGS, SSD_MB (1024), SSD_DIR (target/cmp-cache-ssd),
# EXTSTORE_OPTS (ext_page_size=8,ext_item_age=0);
# see compare_cache.py. CONFIGS="scaledkv-tier memcached-ext" compares the
# SSD tier with memcached's extstore.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null || ! command -v memcached >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools memcached
fi
command -v python3 >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3; }
cargo build --release -p scaledkv-server -p scaledkv-bench
exec python3 scripts/compare_cache.py "$@"
