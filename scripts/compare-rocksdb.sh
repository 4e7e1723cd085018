#!/usr/bin/env bash
# Side by side: ScaledKV vs RocksDB on RocksDB's own db_bench workloads.
#
# Installs Debian's rocksdb-tools (db_bench 7.8, built with assertions), builds
# scaledkv-bench, and with RELEASE_ROCKSDB=1 (default) also a release build of
# RocksDB through the `rocksdb` cargo feature (compiles RocksDB: ~25 min the
# first time on 2 cores). Then runs scripts/compare_rocksdb.py, which prints
# the tables that go into BENCHMARKS.md.
#
# Environment: REPEATS (3), MEDIA ("/dev/shm <repo>/bench-data"), QUICK=1 for
# a small smoke run; see compare_rocksdb.py for the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v db_bench >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rocksdb-tools
fi
command -v python3 >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3; }
cargo build --release -p scaledkv-bench
if [ "${RELEASE_ROCKSDB:-1}" = 1 ]; then
    command -v clang >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libclang-dev; }
    CARGO_TARGET_DIR=target/rocksdb cargo build --release -p scaledkv-bench --features rocksdb
fi
exec python3 scripts/compare_rocksdb.py "$@"
