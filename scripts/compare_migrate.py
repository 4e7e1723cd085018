#!/usr/bin/env python3
"""MIGRATE from one server to another, ScaledKV's against Redis's.

The source takes N SETs of VALUE bytes (redis-benchmark -r N -P 16 -c 50:
about 63% distinct keys); then one client moves every key to an empty
target of the same kind with `MIGRATE host port "" 0 5000 KEYS k1 .. kB`,
BATCH keys per call, the names read by SCAN first. Pairs:
  redis-none     Redis 7 -> Redis 7, no persistence
  redis-always   Redis 7 -> Redis 7, appendfsync always (both sides)
  scaledkv-sync  ScaledKV -> ScaledKV, durability sync (every RESTORE and
                 every delete durable before its reply)
Reported: keys per second moved, and the CPU seconds of source and target
(from /proc). REPEATS interleaved rounds on each medium, fresh servers and
data directories each time; medians. Every process started here is
stopped by its PID; results go to bench-results/migrate-<timestamp>.md.
"""

import os
import socket
import subprocess
import time

import compare_redis
from compare_redis import Server, emit, median, ratio

QUICK = os.environ.get("QUICK") == "1"
REPEATS = int(os.environ.get("REPEATS", "1" if QUICK else "3"))
N = int(os.environ.get("N", "50000" if QUICK else "200000"))
VALUE = int(os.environ.get("VALUE", "1024"))
BATCH = int(os.environ.get("BATCH", "100"))
MEDIA = os.environ.get("MEDIA", f"/dev/shm {compare_redis.REPO}/bench-data").split()
CONFIGS = os.environ.get("CONFIGS", "redis-none redis-always scaledkv-sync").split()
compare_redis.REPORT = os.path.join(compare_redis.REPO, "bench-results",
                                    f"migrate-{time.strftime('%Y%m%d-%H%M%S')}.md")


class Client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def call(self, *words):
        self.sock.sendall(compare_redis.resp_command(*words))
        return self.reply()

    def reply(self):
        line = self.file.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind in (b"+", b":"):
            return rest
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise RuntimeError(f"unexpected reply {line!r}")


def all_keys(client):
    keys, cursor = [], b"0"
    while True:
        cursor, batch = client.call("SCAN", cursor, "COUNT", 1000)
        keys.extend(batch)
        if cursor == b"0":
            return keys


def one_round(config, medium):
    # Server keeps its data in <medium>/cmp-redis-<config>: the target's
    # medium is a directory of its own beside it.
    target_medium = os.path.join(medium, "migrate-target")
    os.makedirs(target_medium, exist_ok=True)
    source, target = Server(config, medium), Server(config, target_medium)
    try:
        subprocess.run(["redis-benchmark", "-p", str(source.port), "-t", "set", "-n", str(N), "-r", str(N),
                        "-d", str(VALUE), "-c", "50", "-P", "16", "-q"], capture_output=True, check=True)
        client = Client(source.port)
        keys = all_keys(client)
        cpu_source, cpu_target = source.cpu_seconds(), target.cpu_seconds()
        started = time.time()
        for at in range(0, len(keys), BATCH):
            reply = client.call("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys[at:at + BATCH])
            if reply != b"OK":
                raise RuntimeError(f"MIGRATE answered {reply!r}")
        seconds = time.time() - started
        moved = int(compare_redis.cli(target.port, "DBSIZE"))
        left = int(compare_redis.cli(source.port, "DBSIZE"))
        if moved != len(keys) or left != 0:
            raise RuntimeError(f"{moved} of {len(keys)} keys on the target, {left} left on the source")
        return {"keys": len(keys), "rate": len(keys) / seconds,
                "cpu_source": source.cpu_seconds() - cpu_source, "cpu_target": target.cpu_seconds() - cpu_target}
    finally:
        source.stop()
        target.stop()
        os.rmdir(target_medium)


def main():
    emit(f"## MIGRATE ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
         f"-n {N} -r {N} -d {VALUE}, {BATCH} keys per MIGRATE)")
    for medium in MEDIA:
        runs = {config: [] for config in CONFIGS}
        for _ in range(REPEATS):
            for config in CONFIGS:
                runs[config].append(one_round(config, medium))
        emit(f"\n### {medium}, medians of {REPEATS}\n")
        emit("| pair | keys | keys moved/s | source CPU µs/key | target CPU µs/key | vs redis-none | vs redis-always |")
        emit("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        rate = {config: median([r["rate"] for r in runs[config]]) for config in CONFIGS}
        for config in CONFIGS:
            rs = runs[config]
            emit(f"| {config} | {rs[0]['keys']} | {rate[config]:,.0f} | "
                 f"{median([r['cpu_source'] * 1e6 / r['keys'] for r in rs]):.2f} | "
                 f"{median([r['cpu_target'] * 1e6 / r['keys'] for r in rs]):.2f} | "
                 f"{ratio(rate[config], rate.get('redis-none', float('nan')))} | "
                 f"{ratio(rate[config], rate.get('redis-always', float('nan')))} |")
        emit("\nEach run (keys moved/s): " + "; ".join(
            f"{config} " + ", ".join(f"{r['rate']:,.0f}" for r in runs[config]) for config in CONFIGS))


if __name__ == "__main__":
    main()
