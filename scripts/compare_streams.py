#!/usr/bin/env python3
"""Streams, scaledkv-server vs redis-server, side by side.

redis-benchmark sends stream commands with -c 50 and -n N at each pipeline
depth, in this order on one server:
  xadd        XADD events * f <100 B>: every client appends to one stream
  xadd-capped XADD capped MAXLEN ~ 1000 * f <100 B>: one stream, trimmed
  xadd-keys   XADD stream:<rand> * f <100 B>: -r KEYSPACE streams
  xrevrange   XREVRANGE events + - COUNT 10: the ten newest entries
  xrange      XRANGE events - + COUNT 10: the ten oldest
  xreadgroup  XREADGROUP GROUP g c COUNT 1 STREAMS events >: each call
              delivers the next entry of `events` and makes it pending
against Redis 7 without persistence and with `appendfsync always`, and
ScaledKV in `sync` mode (every write durable before its reply), each on a
fresh data directory on each medium, REPEATS times interleaved. Medians of
req/s, p50/p99 latency and the server's CPU time per request.

Every process started here is stopped by its PID. Results are printed and
appended to bench-results/streams-<timestamp>.md.
"""

import os
import subprocess
import time

import compare_redis
from compare_redis import REPO

REPEATS = int(os.environ.get("REPEATS", "3"))
N = int(os.environ.get("N", "200000"))
KEYSPACE = int(os.environ.get("KEYSPACE", "10000"))
PIPELINES = [int(p) for p in os.environ.get("PIPELINES", "1 16").split()]
MEDIA = os.environ.get("MEDIA", f"/dev/shm {REPO}/bench-data").split()
CONFIGS = os.environ.get("CONFIGS", "redis-none redis-always scaledkv-sync").split()
CLIENTS = 50
REPORT = os.path.join(REPO, "bench-results", f"streams-{time.strftime('%Y%m%d-%H%M%S')}.md")
compare_redis.REPORT = REPORT
emit = compare_redis.emit

VALUE = "v" * 100
WORKLOADS = {
    "xadd": ["XADD", "events", "*", "f", VALUE],
    "xadd-capped": ["XADD", "capped", "MAXLEN", "~", "1000", "*", "f", VALUE],
    "xadd-keys": ["XADD", "stream:__rand_int__", "*", "f", VALUE],
    "xrevrange": ["XREVRANGE", "events", "+", "-", "COUNT", "10"],
    "xrange": ["XRANGE", "events", "-", "+", "COUNT", "10"],
    "xreadgroup": ["XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "events", ">"],
}


def bench(server, name, pipeline):
    if name == "xreadgroup":
        subprocess.run(["redis-cli", "-p", str(server.port), "XGROUP", "CREATE", "events", "g", "0"],
                       capture_output=True, check=True)
    return compare_redis.bench_command(server, WORKLOADS[name], N, pipeline, CLIENTS, KEYSPACE)


def main():
    emit(f"## Streams: scaledkv-server vs Redis ({time.strftime('%Y-%m-%d %H:%M')}, "
         f"{os.cpu_count()} cores, -n {N} -r {KEYSPACE} -c {CLIENTS}, 100-byte values)")
    compare_redis.side_by_side(list(WORKLOADS), bench, CONFIGS, MEDIA, PIPELINES, REPEATS, "workload")
    print(f"\nwritten to {REPORT}")


if __name__ == "__main__":
    main()
