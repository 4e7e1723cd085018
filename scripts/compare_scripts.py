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
from compare_redis import REPO

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
    return compare_redis.bench_command(server, ["EVALSHA", sha] + args, N, pipeline, CLIENTS, KEYSPACE)


def main():
    emit(f"## Lua scripts (EVALSHA): scaledkv-server vs Redis ({time.strftime('%Y-%m-%d %H:%M')}, "
         f"{os.cpu_count()} cores, -n {N} -r {KEYSPACE} -c {CLIENTS})")
    compare_redis.side_by_side(list(SCRIPTS), bench, CONFIGS, MEDIA, PIPELINES, REPEATS, "script")
    print(f"\nwritten to {REPORT}")


if __name__ == "__main__":
    main()
