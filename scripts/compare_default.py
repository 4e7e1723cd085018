#!/usr/bin/env python3
"""redis-benchmark's own default tests, scaledkv-server vs redis-server.

What a user sees first: `redis-benchmark -q` runs PING, SET, GET, INCR,
list, set, hash and sorted-set pushes and pops, LRANGE and MSET with its
defaults (3-byte values, no -r: every test hits one key, as each of
`counter:__rand_int__`, `mylist`, `myset`, `myhash` ... is a fixed name).
Each test runs here on its own (`-t NAME -c 50 -n N -P DEPTH`), in the
default suite's order on one fresh server per round, against Redis 7
without persistence and ScaledKV in `sync` mode on /dev/shm, REPEATS
rounds interleaved; medians of req/s, p50/p99 and the server's CPU time
per request. An LRANGE test's CPU includes the LPUSHes redis-benchmark
runs before it (also N requests).

Settings from the environment as compare_redis.py's (REPEATS, N,
PIPELINES, MEDIA, CONFIGS). Every process started here is stopped by its
PID. Results are printed and appended to bench-results/default-<timestamp>.md.
"""

import os

import compare_redis

os.environ.setdefault("MEDIA", "/dev/shm")
os.environ.setdefault("CONFIGS", "redis-none scaledkv-sync")
RUN = compare_redis.Comparison("default", n=300000)
TESTS = ["ping_inline", "ping_mbulk", "set", "get", "incr", "lpush", "rpush", "lpop", "rpop", "sadd", "hset",
         "spop", "zadd", "zpopmin", "lrange_100", "lrange_600", "mset"]


def bench(server, test, pipeline):
    return compare_redis.run_benchmark(server, RUN.n, ["-t", test, "-c", str(compare_redis.CLIENTS),
                                                       "-P", str(pipeline)])


if __name__ == "__main__":
    RUN.run("redis-benchmark's default tests", TESTS, bench, column="test", detail=" -d 3, one key per test")
