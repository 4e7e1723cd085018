#!/usr/bin/env python3
"""YCSB's core workloads A-F against ScaledKV and its peers, side by side.

Drives every target with `scaledkv-bench ycsb` (YCSB's key choosers,
operation mixes and 10 x 100-byte records; see crates/bench/src/ycsb):

  servers (Redis protocol, a record is a hash, as in YCSB's Redis binding):
    scaledkv        scaledkv-server, durability sync (every write durable
                    before its reply), data on MEDIUM
    redis-none      Redis 7, no persistence
    redis-always    Redis 7, AOF appendfsync always, on MEDIUM
  servers (memcached protocol, a record is one item; workload e skipped):
    scaledkv-mc     scaledkv-server's memcached port, sync, on MEDIUM
    memcached       memcached 1.6 (memory only, its default 4 threads)
  embedded (in-process, one record one value), with ENGINES:
    engine-sync     the ScaledKV engine, durability sync
    rocksdb-sync    RocksDB release build, WAL with sync=1
    engine-buffered / rocksdb-buffered: buffered against WAL sync=0
    (RocksDB needs the `rocksdb` feature's binary, ROCKS_BENCH, built by
    compare-ycsb.sh; without it only the engine runs)

Each server starts fresh, is loaded with RECORDS records, then runs each
workload of WORKLOADS (OPERATIONS operations, SCAN_OPERATIONS for e: a scan
through the Redis protocol is up to 100 round trips) as its own process,
so the server's CPU time per operation (from /proc) is per workload.
REPEATS rounds, configurations interleaved within a round; medians, and
a bar chart per table (bench-results/ycsb-<timestamp>-<table>.svg, drawn
by `scaledkv-bench chart`).
Every process started here is stopped by its PID. Results are printed and
appended to bench-results/ycsb-<timestamp>.md.
"""

import os
import re
import shutil
import subprocess
import time

import compare_memcached
import compare_redis
import hoststeal
from compare_redis import REPO, median, ratio

REPEATS = int(os.environ.get("REPEATS", "3"))
RECORDS = int(os.environ.get("RECORDS", "100000"))
OPERATIONS = int(os.environ.get("OPERATIONS", "100000"))
SCAN_OPERATIONS = int(os.environ.get("SCAN_OPERATIONS", "5000"))
THREADS = int(os.environ.get("THREADS", "8"))
MEDIUM = os.environ.get("MEDIUM", "/dev/shm")
WORKLOADS = os.environ.get("WORKLOADS", "a b c f d e").split()
CONFIGS = os.environ.get("CONFIGS", "scaledkv redis-none redis-always scaledkv-mc memcached").split()
ENGINES = os.environ.get("ENGINES", "engine-sync rocksdb-sync engine-buffered rocksdb-buffered").split()
BENCH = os.path.join(REPO, "target/release/scaledkv-bench")
ROCKS_BENCH = os.environ.get("ROCKS_BENCH", os.path.join(REPO, "target/rocksdb/release/scaledkv-bench"))
REPORT = os.path.join(REPO, "bench-results", f"ycsb-{time.strftime('%Y%m%d-%H%M%S')}.md")
compare_redis.REPORT = REPORT
emit = compare_redis.emit
SUMMARY = re.compile(r"^ycsb-(\w+)\s*:\s*([\d.]+) ops/sec;(.*)$")
LATENCY = re.compile(r" ([A-Z-]+) p50 (\d+) p99 (\d+) us;")
# The operation whose p99 a workload's row shows.
MAIN_OP = {"load": "INSERT", "a": "UPDATE", "b": "READ", "c": "READ", "d": "READ", "e": "SCAN",
           "f": "READ-MODIFY-WRITE"}


class Memcached(compare_memcached.Server):
    def __init__(self, config):
        compare_memcached.MEDIA["scaledkv-mc"] = MEDIUM
        super().__init__("memcached" if config == "memcached" else "scaledkv-mc")


def start(config):
    if config in ("scaledkv-mc", "memcached"):
        return Memcached(config), "memcached"
    name = {"scaledkv": "scaledkv-sync"}.get(config, config)
    return compare_redis.Server(name, MEDIUM), "redis"


def ycsb(binary, args):
    out = subprocess.run([binary, "ycsb", "--progress", "never", "--threads", str(THREADS),
                          "--records", str(RECORDS)] + args, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"scaledkv-bench ycsb {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")
    results = {}
    for line in out.stdout.splitlines():
        found = SUMMARY.match(line)
        if found:
            p99 = {op: int(p99) for op, _, p99 in LATENCY.findall(found.group(3))}
            results[found.group(1)] = {"ops": float(found.group(2)), "p99": p99}
    return results


def server_round(config):
    """One fresh server: load, then each workload; per phase ops/s, p99, server CPU µs/op."""
    server, protocol = start(config)
    target = f"{protocol}://127.0.0.1:{server.port}"
    phases = {}
    try:
        for phase in ["load"] + WORKLOADS:
            if phase == "e" and protocol == "memcached":
                continue
            ops = {"load": RECORDS, "e": SCAN_OPERATIONS}.get(phase, OPERATIONS)
            before = server.cpu_seconds()
            result = ycsb(BENCH, ["--target", target, "--workloads", phase, "--operations", str(ops)])[phase]
            result["cpu_us"] = (server.cpu_seconds() - before) * 1e6 / ops
            phases[phase] = result
    finally:
        server.stop()
    return phases


def engine_round(config):
    engine, durability = config.split("-")
    binary = ROCKS_BENCH if engine == "rocksdb" else BENCH
    db = os.path.join(MEDIUM, f"cmp-ycsb-{config}")
    try:
        return ycsb(binary, ["--target", "scaledkv" if engine == "engine" else "rocksdb", "--db", db,
                             "--durability", durability, "--operations", str(OPERATIONS),
                             "--workloads", ",".join(["load"] + WORKLOADS)])
    finally:
        shutil.rmtree(db, ignore_errors=True)


def chart(title, slug, rows):
    """Draws rows (workload, config, ops/s) with `scaledkv-bench chart` beside the report."""
    base = REPORT[:-len(".md")] + f"-{slug}"
    with open(base + ".csv", "w") as f:
        f.write("group,series,value\n" + "".join(f"{g},{s},{v:.0f}\n" for g, s, v in rows))
    out = subprocess.run([BENCH, "chart", "--csv", base + ".csv", "--svg", base + ".svg", "--title", title],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"scaledkv-bench chart failed: {out.stderr}")
    emit(f"\nChart: {os.path.relpath(base + '.svg', REPO)} (data: {os.path.relpath(base + '.csv', REPO)})")


def table(title, slug, configs, runs, pairs, cpu):
    emit(f"\n### {title}\n")
    drawn = []
    head = "| workload |" + "".join(f" {c} ops/s (p99 µs) |" for c in configs)
    head += "".join(f" {c} CPU µs/op |" for c in configs if cpu) + "".join(f" {a} ÷ {b} |" for a, b in pairs)
    emit(head)
    emit("|---|" + "---:|" * (head.count("|") - 2))
    for phase in ["load"] + WORKLOADS:
        cells, medians = [], {}
        for c in configs:
            rs = [r[phase] for r in runs[c] if phase in r]
            if not rs:
                cells.append(" — |")
                continue
            medians[c] = median([r["ops"] for r in rs])
            drawn.append((phase, c, medians[c]))
            p99 = median([r["p99"].get(MAIN_OP[phase], 0) for r in rs])
            cells.append(f" {medians[c]:,.0f} ({p99:,.0f}) |")
        if cpu:
            for c in configs:
                rs = [r[phase] for r in runs[c] if phase in r]
                cells.append(f" {median([r['cpu_us'] for r in rs]):.1f} |" if rs else " — |")
        for a, b in pairs:
            cells.append(f" {ratio(medians[a], medians[b])} |" if a in medians and b in medians else " — |")
        emit(f"| {phase} |" + "".join(cells))
    emit("\nEach run (ops/s): " + "; ".join(
        f"{c} {phase} " + "/".join(f"{r[phase]['ops']:,.0f}" for r in runs[c] if phase in r)
        for c in configs for phase in ["load"] + WORKLOADS if any(phase in r for r in runs[c])))
    chart(f"YCSB, {title}, {MEDIUM}", slug, drawn)


def main():
    known = {"scaledkv", "redis-none", "redis-always", "scaledkv-mc", "memcached"}
    for name in CONFIGS:
        if name not in known:
            raise SystemExit(f"unknown configuration {name!r} in CONFIGS: {' '.join(sorted(known))}")
    for name in ENGINES:
        if name not in ("engine-sync", "rocksdb-sync", "engine-buffered", "rocksdb-buffered"):
            raise SystemExit(f"unknown engine {name!r} in ENGINES: engine-sync rocksdb-sync engine-buffered "
                             "rocksdb-buffered (empty: none)")
    have_rocks = os.path.exists(ROCKS_BENCH)
    engines = [e for e in ENGINES if have_rocks or not e.startswith("rocksdb")]
    if not have_rocks:
        print(f"NOTICE: {ROCKS_BENCH} is missing (build with --features rocksdb); RocksDB columns skipped")
    emit(f"## YCSB A-F: {RECORDS:,} records of 10 x 100 B, {OPERATIONS:,} operations per workload "
         f"(e: {SCAN_OPERATIONS:,}), {THREADS} client threads, medium {MEDIUM}, median of {REPEATS} "
         f"({time.strftime('%Y-%m-%d %H:%M')})")
    runs = {c: [] for c in CONFIGS + engines}
    steal_from = hoststeal.cpu_times()
    for rep in range(REPEATS):
        for config in CONFIGS + engines:
            result = server_round(config) if config in CONFIGS else engine_round(config)
            runs[config].append(result)
            print(f"  round {rep + 1}/{REPEATS} {config:16} " + "  ".join(
                f"{phase} {r['ops']:,.0f}" for phase, r in result.items()), flush=True)
    emit(f"\nHost CPU steal during the run: {hoststeal.percent_since(steal_from):.1f}%. "
         "p99 is of the workload's main operation: load INSERT, a UPDATE, b c d READ, e SCAN, "
         "f READ-MODIFY-WRITE.")
    resp = [c for c in CONFIGS if c in ("scaledkv", "redis-none", "redis-always")]
    mc = [c for c in CONFIGS if c in ("scaledkv-mc", "memcached")]
    if resp:
        table("Redis protocol (scaledkv-server sync vs Redis 7)", "redis", resp, runs,
              [("scaledkv", b) for b in ("redis-none", "redis-always") if b in resp and "scaledkv" in resp], True)
    if mc:
        table("memcached protocol (scaledkv-server sync vs memcached)", "memcached", mc, runs,
              [("scaledkv-mc", "memcached")] if len(mc) == 2 else [], True)
    if engines:
        pairs = [(f"engine-{d}", f"rocksdb-{d}") for d in ("sync", "buffered")
                 if f"engine-{d}" in engines and f"rocksdb-{d}" in engines]
        table("Embedded engines (in-process)", "engines", engines, runs, pairs, False)


if __name__ == "__main__":
    main()
