#!/usr/bin/env python3
"""Lua scripts (EVALSHA), scaledkv-server vs redis-server, side by side.

redis-benchmark runs a script by its SHA1 (what clients send after SCRIPT
LOAD) with -c 50, -r KEYSPACE, -n N at each pipeline depth:
  set   a script that SETs KEYS[1] to a 1 KiB ARGV[1]
  rmw   INCR of KEYS[1] and HSET of KEYS[2] with the count (two keys,
        a read-modify-write a script makes atomic)
  get   a script that GETs KEYS[1] (after `set` filled the keyspace)
against Redis 7 without persistence and with `appendfsync always`, and
ScaledKV in `sync` mode (every script's writes durable before its reply),
each on a fresh data directory on each medium, REPEATS times interleaved.
Medians of req/s, p50/p99 latency and the server's CPU time per request.

Every process started here is stopped by its PID. Results are printed and
appended to bench-results/scripts-<timestamp>.md.
"""

import hashlib
import os
import subprocess
import time

import compare_redis
import hoststeal
from compare_redis import REPO, Server, median, ratio

REPEATS = int(os.environ.get("REPEATS", "3"))
N = int(os.environ.get("N", "200000"))
KEYSPACE = int(os.environ.get("KEYSPACE", "100000"))
PIPELINES = [int(p) for p in os.environ.get("PIPELINES", "1 16").split()]
MEDIA = os.environ.get("MEDIA", f"/dev/shm {REPO}/bench-data").split()
CONFIGS = os.environ.get("CONFIGS", "redis-none redis-always scaledkv-sync").split()
CLIENTS = 50
REPORT = os.path.join(REPO, "bench-results", f"scripts-{time.strftime('%Y%m%d-%H%M%S')}.md")
compare_redis.REPORT = REPORT
emit = compare_redis.emit

SCRIPTS = {
    "set": ("return redis.call('set', KEYS[1], ARGV[1])", ["1", "key:__rand_int__", "x" * 1024]),
    "rmw": ("local n = redis.call('incr', KEYS[1]); redis.call('hset', KEYS[2], 'last', n); return n",
            ["2", "count:__rand_int__", "hash:__rand_int__"]),
    "get": ("return redis.call('get', KEYS[1])", ["1", "key:__rand_int__"]),
}


def load(server, body):
    sha = subprocess.run(["redis-cli", "-p", str(server.port), "SCRIPT", "LOAD", body],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert sha == hashlib.sha1(body.encode()).hexdigest(), sha
    return sha


def bench(server, name, pipeline):
    body, args = SCRIPTS[name]
    sha = load(server, body)
    before = server.cpu_seconds()
    out = subprocess.run(
        ["redis-benchmark", "-p", str(server.port), "-n", str(N), "-r", str(KEYSPACE), "-c", str(CLIENTS),
         "-P", str(pipeline), "--csv", "EVALSHA", sha] + args,
        capture_output=True, text=True, check=True)
    cpu = server.cpu_seconds() - before
    row = out.stdout.strip().splitlines()[-1].replace('"', "").split(",")
    return {"rps": float(row[1]), "p50": float(row[4]), "p99": float(row[6]), "cpu_us": cpu * 1e6 / N}


def main():
    emit(f"## Lua scripts (EVALSHA): scaledkv-server vs Redis ({time.strftime('%Y-%m-%d %H:%M')}, "
         f"{os.cpu_count()} cores, -n {N} -r {KEYSPACE} -c {CLIENTS})")
    for medium in MEDIA:
        for pipeline in PIPELINES:
            steal_from = hoststeal.cpu_times()
            runs = {}
            for rep in range(REPEATS):
                for config in CONFIGS:
                    server = Server(config, medium)
                    try:
                        for name in SCRIPTS:
                            result = bench(server, name, pipeline)
                            runs.setdefault((config, name), []).append(result)
                            print(f"  {medium} -P {pipeline} rep {rep + 1}/{REPEATS} {config:14} {name}: "
                                  f"{result['rps']:>10,.0f} req/s  p99 {result['p99']:.3f} ms  "
                                  f"cpu {result['cpu_us']:.2f} us/req", flush=True)
                    finally:
                        server.stop()
            emit(f"\n### {medium}, -P {pipeline}, median of {REPEATS}\n")
            emit(f"Host CPU steal during these runs: {hoststeal.percent_since(steal_from):.1f}%\n")
            emit("| script | server | req/s | p50 ms | p99 ms | server CPU µs/req | vs redis-none | vs redis-always |")
            emit("|---|---|---:|---:|---:|---:|---:|---:|")
            for name in SCRIPTS:
                base_none = median([r["rps"] for r in runs.get(("redis-none", name), [])])
                base_always = median([r["rps"] for r in runs.get(("redis-always", name), [])])
                for config in CONFIGS:
                    rs = runs[(config, name)]
                    rps = median([r["rps"] for r in rs])
                    emit(f"| {name} | {config} | {rps:,.0f} | {median([r['p50'] for r in rs]):.3f} | "
                         f"{median([r['p99'] for r in rs]):.3f} | {median([r['cpu_us'] for r in rs]):.2f} | "
                         f"{ratio(rps, base_none)} | {ratio(rps, base_always)} |")
    print(f"\nwritten to {REPORT}")


if __name__ == "__main__":
    main()
