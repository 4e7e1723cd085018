#!/usr/bin/env python3
"""SORT, scaledkv-server vs redis-server, side by side.

Each fresh server first gets a list `ids` of ELEMENTS numbers (in a
random order), a string `w_<id>` (its weight) and a hash `h_<id>` (field
`name`) for each; then redis-benchmark sends, with -c 50 and -n N at each
pipeline depth:
  sort-10      SORT ids LIMIT 0 10: the ten smallest numbers
  sort-alpha   SORT ids ALPHA DESC LIMIT 0 10
  sort-by-get  SORT ids BY w_* GET # GET h_*->name LIMIT 0 10: by the
               weights, with each one's name (ELEMENTS + 20 reads of
               other keys per call)
  sort-store   SORT ids BY w_* STORE out: the whole list sorted by the
               weights and written (durable in ScaledKV)
against Redis 7 without persistence and with `appendfsync always`, and
ScaledKV in `sync` mode, each on a fresh data directory on each medium,
REPEATS times interleaved. Medians of req/s, p50/p99 latency and the
server's CPU time per request.

Every process started here is stopped by its PID. Results are printed and
appended to bench-results/sort-<timestamp>.md.
"""

import os
import random
import subprocess

import compare_redis

RUN = compare_redis.Comparison("sort", n=100000)
ELEMENTS = int(os.environ.get("ELEMENTS", "100"))

WORKLOADS = {
    "sort-10": ["SORT", "ids", "LIMIT", "0", "10"],
    "sort-alpha": ["SORT", "ids", "ALPHA", "DESC", "LIMIT", "0", "10"],
    "sort-by-get": ["SORT", "ids", "BY", "w_*", "GET", "#", "GET", "h_*->name", "LIMIT", "0", "10"],
    "sort-store": ["SORT", "ids", "BY", "w_*", "STORE", "out"],
}


def fill(server):
    ids = list(range(ELEMENTS))
    random.Random(7).shuffle(ids)
    commands = [["RPUSH", "ids"] + [str(i) for i in ids]]
    for i in ids:
        commands.append(["SET", f"w_{i}", str((i * 7919) % 1000)])
        commands.append(["HSET", f"h_{i}", "name", f"item-{i}"])
    text = "".join("*%d\r\n" % len(c) + "".join("$%d\r\n%s\r\n" % (len(a), a) for a in c) for c in commands)
    subprocess.run(["redis-cli", "-p", str(server.port), "--pipe"], input=text.encode(), capture_output=True,
                   check=True)


def bench(server, name, pipeline):
    if name == "sort-10":
        fill(server)
    return RUN.bench(server, WORKLOADS[name], pipeline)


def main():
    RUN.run("SORT", list(WORKLOADS), bench, detail=f", a list of {ELEMENTS}")


if __name__ == "__main__":
    main()
