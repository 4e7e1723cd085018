#!/usr/bin/env python3
"""Reads of collections, scaledkv-server vs redis-server, side by side.

Each fresh server first gets
  zm, lm   a sorted set and a list of 1,000 (one block of ranks; a list
           kept as one value)
  zb       a sorted set of 20,000 members (a table)
  hb, sb   a hash of 5,000 fields and a set of 5,000 members (tables)
(TABLE_SIZE=n makes hb and sb n big and zb 4n: random picks from big
tables; READS=a,b runs only those reads)
then redis-benchmark sends each read below (-c 10 by default: CLIENTS),
at each pipeline depth, against Redis 7 without persistence and ScaledKV
in `sync` mode on /dev/shm, REPEATS rounds interleaved; medians of
req/s, p50/p99 latency and the server's CPU time per request. With
TRICKLE=1 a client writes ~1,000 SETs/s of other keys during the runs:
what reads cost while writes go on (ScaledKV's unmerged index updates).

Settings from the environment as compare_redis.py's (REPEATS, N,
PIPELINES, MEDIA, CONFIGS; BASELINE_SERVER adds `scaledkv-base`). Every
process started here is stopped by its PID. Results are printed and
appended to bench-results/reads-<timestamp>.md.
"""

import os
import socket
import subprocess
import threading
import time

import compare_redis

os.environ.setdefault("MEDIA", "/dev/shm")
os.environ.setdefault("CONFIGS", "redis-none scaledkv-sync")
os.environ.setdefault("PIPELINES", "1")
RUN = compare_redis.Comparison("reads", n=60000)
CLIENTS = int(os.environ.get("CLIENTS", "10"))
compare_redis.CLIENTS = CLIENTS
TRICKLE = os.environ.get("TRICKLE") == "1"
TABLE_SIZE = int(os.environ.get("TABLE_SIZE", "5000"))

WORKLOADS = {
    "zrank-1k": ["ZRANK", "zm", "m500"],
    "zrank-20k": ["ZRANK", "zb", "m15000"],
    "lindex-1k": ["LINDEX", "lm", "500"],
    "lrange-1k-10": ["LRANGE", "lm", "100", "109"],
    "lrange-1k-100": ["LRANGE", "lm", "0", "99"],
    "srandmember": ["SRANDMEMBER", "sb"],
    "srandmember-5": ["SRANDMEMBER", "sb", "5"],
    "hrandfield": ["HRANDFIELD", "hb"],
    "hrandfield-5": ["HRANDFIELD", "hb", "5"],
    "zrandmember": ["ZRANDMEMBER", "zb"],
    "zrandmember-5": ["ZRANDMEMBER", "zb", "5", "WITHSCORES"],
    "zrangebyscore-11": ["ZRANGEBYSCORE", "zb", "5000", "5010"],
    "zrange-rank-10": ["ZRANGE", "zb", "15000", "15009"],
    "zcount-1k": ["ZCOUNT", "zb", "5000", "6000"],
    "hscan-10": ["HSCAN", "hb", "0", "COUNT", "10"],
    "sscan-10": ["SSCAN", "sb", "0", "COUNT", "10"],
    "get": ["GET", "k1"],
}
if os.environ.get("READS"):
    WORKLOADS = {name: WORKLOADS[name] for name in os.environ["READS"].split(",")}


def fill(server):
    commands = [["SET", "k1", "v1"]]
    for key, members in (("zm", 1000), ("zb", 4 * TABLE_SIZE)):
        for start in range(0, members, 1000):
            words = ["ZADD", key]
            for i in range(start + 1, start + 1001):
                words += [str(i), f"m{i}"]
            commands.append(words)
    commands.append(["RPUSH", "lm"] + [f"e{i}" for i in range(1, 1001)])
    for start in range(0, TABLE_SIZE, 1000):
        commands.append(["HSET", "hb"] + [w for i in range(start + 1, start + 1001) for w in (f"f{i}", f"v{i}")])
        commands.append(["SADD", "sb"] + [f"m{i}" for i in range(start + 1, start + 1001)])
    text = "".join("*%d\r\n" % len(c) + "".join("$%d\r\n%s\r\n" % (len(a), a) for a in c) for c in commands)
    subprocess.run(["redis-cli", "-p", str(server.port), "--pipe"], input=text.encode(), capture_output=True,
                   check=True)


class Trickle:
    """A client writing five SETs of its own keys every ~5 ms until stopped."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        i = 0
        while not self.stopped.is_set():
            self.sock.sendall(b"".join(b"SET trickle%d:%d v\r\n" % (j, i) for j in range(5)))
            got = b""
            while got.count(b"\r\n") < 5:
                chunk = self.sock.recv(100)
                if not chunk:
                    return
                got += chunk
            i += 1
            time.sleep(0.005)

    def stop(self):
        self.stopped.set()
        self.thread.join()
        self.sock.close()


def bench(server, name, pipeline):
    if name == next(iter(WORKLOADS)):
        fill(server)
    trickle = Trickle(server.port) if TRICKLE else None
    try:
        return compare_redis.bench_command(server, WORKLOADS[name], RUN.n, pipeline, CLIENTS)
    finally:
        if trickle:
            trickle.stop()


def main():
    detail = ", with a trickle of SETs" if TRICKLE else ""
    RUN.run("Reads of collections", list(WORKLOADS), bench, column="read", detail=detail)


if __name__ == "__main__":
    main()
