#!/usr/bin/env bash
# The persisted-hashmap experiment, side by side in one run: the toolkit's
# hash map (one-fence insert and transactional insert), the same map with
# mmap + msync and with write + fdatasync, and PMDK's libpmemobj running the
# same map (scripts/pmdk_hashmap.c), on /dev/shm (the persistent-memory
# stand-in) and on the disk the repository lives on.
#
# Installs Debian's libpmemobj-dev, builds the C program and scaledkv-bench,
# and writes bench-results/hashmap-{tmpfs,disk}.{md,svg} (table + log-scale chart).
#
# Environment: REPEATS (3), NUMS_TMPFS (1000,...,10000000), NUMS_DISK
# (1000,...,1000000), MAX_DURABLE_DISK (100000: on a disk every per-insert
# durable variant waits for the device each time; batched ones run all N).
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=${REPEATS:-3}
NUMS_TMPFS=${NUMS_TMPFS:-1000,10000,100000,1000000,10000000}
NUMS_DISK=${NUMS_DISK:-1000,10000,100000,1000000}
MAX_DURABLE_DISK=${MAX_DURABLE_DISK:-100000}
if [ ! -e /usr/include/libpmemobj.h ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libpmemobj-dev
fi
mkdir -p target bench-results
gcc -O2 -Wall -o target/pmdk_hashmap scripts/pmdk_hashmap.c -lpmemobj
cargo build --release -p scaledkv-bench
bench=target/release/scaledkv-bench
tmpfs_dir=/dev/shm/scaledkv-hashmap
disk_dir=$PWD/bench-data/hashmap
trap 'rm -rf "$tmpfs_dir" "$disk_dir"' EXIT
"$bench" hashmap --db "$tmpfs_dir" --num "$NUMS_TMPFS" --repeats "$REPEATS" --pmdk target/pmdk_hashmap \
    --markdown bench-results/hashmap-tmpfs.md --chart bench-results/hashmap-tmpfs.svg
"$bench" hashmap --db "$disk_dir" --num "$NUMS_DISK" --repeats "$REPEATS" --pmdk target/pmdk_hashmap \
    --max_durable_num "$MAX_DURABLE_DISK" \
    --markdown bench-results/hashmap-disk.md --chart bench-results/hashmap-disk.svg
echo
cat bench-results/hashmap-tmpfs.md
echo
cat bench-results/hashmap-disk.md
