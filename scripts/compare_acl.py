#!/usr/bin/env python3
"""What ACL users cost, scaledkv-server vs redis-server, side by side.

Each fresh server gets two users besides `default`:
  keys    +@all ~key:* &*            (a key pattern to match)
  narrow  +@read +@write -@dangerous %R~key:* %W~key:*
          (categories, and read and write patterns)
then redis-benchmark (`-t get` and `-t set`, -c 50, -d VALUE, -r KEYSPACE,
-n N at each pipeline depth) runs as each of the three users, against
Redis 7 without persistence and ScaledKV in `sync` mode on /dev/shm,
REPEATS times interleaved, after an unmeasured fill of every key (so
that each run reads hits and overwrites, whatever its place in the
order). Medians of req/s, p50/p99 latency and the
server's CPU time per request: a user's cost is its CPU per request less
`default`'s (whose commands are not checked while it may run everything).

Every process started here is stopped by its PID. Results are printed and
appended to bench-results/acl-<timestamp>.md.
"""

import os
import subprocess

import compare_redis

os.environ.setdefault("MEDIA", "/dev/shm")
os.environ.setdefault("CONFIGS", "redis-none scaledkv-sync")
RUN = compare_redis.Comparison("acl", n=1000000, keyspace=100000)
VALUE = int(os.environ.get("VALUE", "100"))
USERS = {
    "keys": ["+@all", "~key:*", "&*"],
    "narrow": ["+@read", "+@write", "-@dangerous", "%R~key:*", "%W~key:*"],
}
WORKLOADS = [f"{test}-{user}" for test in ("get", "set") for user in ("default", "keys", "narrow")]


def prepare(server):
    """The users, and every key written twice (not measured), once per
    fresh server."""
    if getattr(server, "prepared", False):
        return
    for each, rules in USERS.items():
        subprocess.run(["redis-cli", "-p", str(server.port), "ACL", "SETUSER", each, "on", ">pw"] + rules,
                       check=True, capture_output=True)
    compare_redis.run_benchmark(server, 2 * RUN.keyspace, ["-t", "set", "-r", str(RUN.keyspace), "-d", str(VALUE),
                                                            "-P", "16"])
    server.prepared = True


def bench(server, name, pipeline):
    test, user = name.split("-")
    prepare(server)
    login = [] if user == "default" else ["--user", user, "-a", "pw"]
    args = ["-t", test, "-r", str(RUN.keyspace), "-c", str(compare_redis.CLIENTS), "-d", str(VALUE),
            "-P", str(pipeline)] + login
    return compare_redis.run_benchmark(server, RUN.n, args)


if __name__ == "__main__":
    RUN.run("ACL users", WORKLOADS, bench, detail=f" -d {VALUE}")
