#!/usr/bin/env python3
"""One command that changes a big collection whole, scaledkv-server vs
redis-server, side by side.

Each fresh server gets a sorted set, a set and a hash of N members
(`m:<i>`, filled 10,000 at a time), then one client sends, each as a
single command, and times its reply:
  ZADD, SADD, HSET   N new members into the N there
  ZREM, SREM, HDEL   N of those 2N
  SPOP               N/2 of the set's N
  ZPOPMIN, SPOP      everything left (the key goes)
ScaledKV commits such a change in pieces past one engine batch and
deletes an emptied collection's key at once (README, "Differences").
Redis 7 without persistence against ScaledKV `sync`, both with their
data on MEDIA (default /dev/shm), REPEATS rounds interleaved (default
3); medians in seconds. N defaults to 300,000. Every process started
here is stopped by its PID; the report is appended to
bench-results/big-commands-<timestamp>.md.
"""

import os
import socket
import statistics
import time

import compare_redis

N = int(os.environ.get("N", "300000"))
REPEATS = int(os.environ.get("REPEATS", "3"))
MEDIUM = os.environ.get("MEDIA", "/dev/shm").split()[0]
CONFIGS = ["redis-none", "scaledkv-sync"]
compare_redis.REPORT = os.path.join(
    compare_redis.REPO, "bench-results", f"big-commands-{time.strftime('%Y%m%d-%H%M%S')}.md"
)


class Client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(600)
        self.file = self.sock.makefile("rb")

    def reply(self):
        """Reads one reply whole; returns its first line."""
        line = self.file.readline()
        if line[:1] == b"$" and int(line[1:]) >= 0:
            self.file.read(int(line[1:]) + 2)
        elif line[:1] == b"*":
            for _ in range(int(line[1:])):
                self.reply()
        elif line[:1] == b"-":
            raise RuntimeError(line.decode().strip())
        return line.strip()

    def call(self, *args):
        self.sock.sendall(compare_redis.resp_command(*args))
        return self.reply()


def members(first, end):
    return [b"m:%09d" % i for i in range(first, end)]


def scored(first, end):
    return [word for i in range(first, end) for word in (str(i).encode(), b"m:%09d" % i)]


def valued(first, end):
    return [word for i in range(first, end) for word in (b"m:%09d" % i, b"v")]


WORKLOADS = [
    ("ZADD N new into N", lambda: ["ZADD", "z"] + scored(N, 2 * N)),
    ("SADD N new into N", lambda: ["SADD", "s"] + members(N, 2 * N)),
    ("HSET N new into N", lambda: ["HSET", "h"] + valued(N, 2 * N)),
    ("ZREM N of 2N", lambda: ["ZREM", "z"] + members(0, N)),
    ("SREM N of 2N", lambda: ["SREM", "s"] + members(0, N)),
    ("HDEL N of 2N", lambda: ["HDEL", "h"] + members(0, N)),
    ("SPOP N/2 of N", lambda: ["SPOP", "s", N // 2]),
    ("ZPOPMIN all N", lambda: ["ZPOPMIN", "z", 2 * N]),
    ("SPOP all N/2", lambda: ["SPOP", "s", N]),
]


def round_on(config):
    """Times each workload once on a fresh server; returns {name: seconds}."""
    server = compare_redis.Server(config, MEDIUM)
    try:
        client = Client(server.port)
        for first in range(0, N, 10000):
            end = min(N, first + 10000)
            client.call("ZADD", "z", *scored(first, end))
            client.call("SADD", "s", *members(first, end))
            client.call("HSET", "h", *valued(first, end))
        times = {}
        for name, command in WORKLOADS:
            args = command()
            started = time.time()
            client.call(*args)
            times[name] = time.time() - started
        return times
    finally:
        server.stop()


def main():
    compare_redis.emit(f"## Big collections changed by one command ({time.strftime('%Y-%m-%d %H:%M')}, "
                       f"{os.cpu_count()} cores, N = {N:,}, {MEDIUM})")
    runs = {config: [] for config in CONFIGS}
    for repeat in range(REPEATS):
        for config in CONFIGS:
            runs[config].append(round_on(config))
            print(f"  round {repeat + 1}/{REPEATS} {config} done", flush=True)
    compare_redis.emit("\n| command | " + " | ".join(CONFIGS) + " | ScaledKV ÷ Redis time |")
    compare_redis.emit("|---|" + "---:|" * (len(CONFIGS) + 1))
    for name, _ in WORKLOADS:
        medians = [statistics.median(run[name] for run in runs[config]) for config in CONFIGS]
        cells = " | ".join(f"{m:.3f} s" for m in medians)
        compare_redis.emit(f"| {name} | {cells} | {medians[1] / medians[0]:.2f}× |")
    print(f"\nwritten to {compare_redis.REPORT}")


if __name__ == "__main__":
    main()
