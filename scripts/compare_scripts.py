#!/usr/bin/env python3
"""Lua scripts (EVALSHA) and functions (FCALL), scaledkv-server vs
redis-server, side by side.

redis-benchmark runs a script by its SHA1 (what clients send after SCRIPT
LOAD) with -c 50, -r KEYSPACE, -n N at each pipeline depth:
  set   a script that SETs KEYS[1] to a 1 KiB ARGV[1]
  rmw   INCR of KEYS[1] and HSET of KEYS[2] with the count (two keys,
        a read-modify-write a script makes atomic)
  get   a script that GETs KEYS[1] (after `set` filled the keyspace)
and the same three as functions of one library (FUNCTION LOAD, then FCALL:
fcall-set, fcall-rmw, fcall-get); WORKLOADS picks some (default all),
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

import compare_redis

RUN = compare_redis.Comparison("scripts", n=200000, keyspace=100000)

SCRIPTS = {
    "set": ("return redis.call('set', KEYS[1], ARGV[1])", ["1", "key:__rand_int__", "x" * 1024]),
    "rmw": ("local n = redis.call('incr', KEYS[1]); redis.call('hset', KEYS[2], 'last', n); return n",
            ["2", "count:__rand_int__", "hash:__rand_int__"]),
    "get": ("return redis.call('get', KEYS[1])", ["1", "key:__rand_int__"]),
}


LIBRARY = "#!lua name=bench\n" + "\n".join(
    f"redis.register_function('{name}', function(KEYS, ARGV) {body} end)" for name, (body, _) in SCRIPTS.items())
WORKLOADS = os.environ.get("WORKLOADS", " ".join(list(SCRIPTS) + [f"fcall-{name}" for name in SCRIPTS])).split()


def load(server, body):
    sha = subprocess.run(["redis-cli", "-p", str(server.port), "SCRIPT", "LOAD", body],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert sha == hashlib.sha1(body.encode()).hexdigest(), sha
    return sha


def bench(server, name, pipeline):
    if name.startswith("fcall-"):
        function = name[len("fcall-"):]
        subprocess.run(["redis-cli", "-p", str(server.port), "FUNCTION", "LOAD", "REPLACE", LIBRARY],
                       capture_output=True, check=True)
        return RUN.bench(server, ["FCALL", function] + SCRIPTS[function][1], pipeline)
    body, args = SCRIPTS[name]
    sha = load(server, body)
    return RUN.bench(server, ["EVALSHA", sha] + args, pipeline)


def main():
    RUN.run("Lua scripts (EVALSHA) and functions (FCALL)", WORKLOADS, bench, column="script")


if __name__ == "__main__":
    main()
