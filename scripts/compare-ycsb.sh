#!/usr/bin/env bash
# YCSB's core workloads A-F side by side: scaledkv-server against Redis 7
# (Redis protocol) and memcached (memcached protocol), and the embedded
# engine against a release build of RocksDB, with `scaledkv-bench ycsb`.
#
# Installs Debian's redis-server, redis-tools and memcached, builds
# scaledkv-server and scaledkv-bench (and, unless NO_ROCKSDB=1, the bench
# with the `rocksdb` feature: RocksDB compiles from source, minutes the
# first time), then runs scripts/compare_ycsb.py, which prints the tables
# and appends them to bench-results/ycsb-*.md.
#
# Environment: REPEATS (3), RECORDS (100000), OPERATIONS (100000),
# SCAN_OPERATIONS (5000), THREADS (8), MEDIUM (/dev/shm), WORKLOADS
# ("a b c f d e"), CONFIGS, ENGINES; see compare_ycsb.py.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null || ! command -v memcached >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools memcached
fi
command -v python3 >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3; }
cargo build --release -p scaledkv-server -p scaledkv-bench
if [ "${NO_ROCKSDB:-0}" != 1 ]; then
    # librocksdb-sys generates its bindings with bindgen, which needs libclang.
    command -v clang >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libclang-dev; }
    CARGO_TARGET_DIR=target/rocksdb cargo build --release -p scaledkv-bench --features rocksdb
fi
exec python3 scripts/compare_ycsb.py "$@"
