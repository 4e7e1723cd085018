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

import subprocess

import compare_redis

RUN = compare_redis.Comparison("streams", n=200000, keyspace=10000)

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
    return RUN.bench(server, WORKLOADS[name], pipeline)


def main():
    RUN.run("Streams", list(WORKLOADS), bench, detail=", 100-byte values")


if __name__ == "__main__":
    main()
