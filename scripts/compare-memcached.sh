#!/usr/bin/env bash
# Side by side: scaledkv-server's memcached protocol vs memcached under
# libmemcached's memaslap, on the same machine, in one run.
#
# Installs Debian's memcached and libmemcached-tools (memcaslap), builds
# scaledkv-server, and runs scripts/compare_memcached.py, which prints (and
# appends to bench-results/memcached-*.md) the tables for BENCHMARKS.md.
#
# Environment: REPEATS (3), TIME (8 s per run), WORKLOADS ("set get
# multiget"), CONFIGS ("memcached memcached-1t scaledkv-tmpfs scaledkv-disk"),
# BASELINE_SERVER (an A/B build), PROTOCOL (ascii; binary: memaslap -B);
# see compare_memcached.py.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v memcached >/dev/null || ! command -v memcaslap >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq memcached libmemcached-tools
fi
command -v python3 >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3; }
cargo build --release -p scaledkv-server
exec python3 scripts/compare_memcached.py "$@"
