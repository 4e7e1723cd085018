#!/usr/bin/env python3
"""A replica of a Redis master: scaledkv-server vs redis-server, side by side.

A Redis 7 master without persistence takes N SETs of VALUE bytes (-r N:
about 63% distinct keys), then a replica on the medium follows it:
  redis-none    Redis 7 replica, no persistence
  redis-always  Redis 7 replica, AOF with appendfsync always
  scaledkv-sync ScaledKV replica (REPLICAOF), durability sync: every write
                it acknowledges to the master is on its medium
and the script measures
  full sync     REPLICAOF until the link is up (the master's RDB made,
                sent and loaded), and the replica's CPU for it
  follow        redis-benchmark -t set -n N -P 16 -c 50 against the master
                while the replica follows: the master's SET/s, how long the
                replica takes after the last reply to reach the master's
                offset (its lag), the writes it applied per second from the
                start to then, and its CPU µs per write
  catch up      the replica stopped (SIGSTOP) while the master takes N more
                SETs into its output buffer for it, then let go (SIGCONT):
                the writes it applies per second until it has the master's
                offset, what it can take when it is the one that limits
each REPEATS times, interleaved, on a fresh master and a fresh data
directory on each medium; medians. The master, the replica and
redis-benchmark share the machine's cores.

Every process started here is stopped by its PID. Results are printed and
appended to bench-results/replica-<timestamp>.md.
"""

import os
import signal
import subprocess
import time

import compare_redis
from compare_redis import cli, info, wait_until, Server, emit, median, ratio

QUICK = os.environ.get("QUICK") == "1"
REPEATS = int(os.environ.get("REPEATS", "1" if QUICK else "3"))
N = int(os.environ.get("N", "100000" if QUICK else "500000"))
VALUE = int(os.environ.get("VALUE", "1024"))
MEDIA = os.environ.get("MEDIA", f"/dev/shm {compare_redis.REPO}/bench-data").split()
CONFIGS = os.environ.get("CONFIGS", "redis-none redis-always scaledkv-sync").split()
compare_redis.REPORT = os.path.join(compare_redis.REPO, "bench-results",
                                    f"replica-{time.strftime('%Y%m%d-%H%M%S')}.md")


def load(port):
    subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set", "-n", str(N), "-r", str(N),
                    "-d", str(VALUE), "-c", "50", "-P", "16", "-q"], capture_output=True, check=True)


def one_round(config, medium):
    master = Server("redis-none", "/dev/shm")
    replica = Server(config, medium)
    try:
        cli(master.port, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
        # The catch-up's backlog must not drop the stopped replica.
        cli(master.port, "CONFIG", "SET", "client-output-buffer-limit", "replica 0 0 0")
        load(master.port)
        keys = int(cli(master.port, "DBSIZE"))
        cpu, started = replica.cpu_seconds(), time.time()
        cli(replica.port, "REPLICAOF", "127.0.0.1", master.port)
        wait_until(lambda: info(replica.port, "master_link_status") == "up")
        sync = {"seconds": time.time() - started, "cpu": replica.cpu_seconds() - cpu, "keys": keys}
        cpu, started = replica.cpu_seconds(), time.time()
        rps = compare_redis.run_benchmark(master, N, ["-t", "set", "-r", str(N), "-c", "50", "-d", str(VALUE),
                                                      "-P", "16"])["rps"]
        ended = time.time()
        target = int(info(master.port, "master_repl_offset"))
        wait_until(lambda: int(info(replica.port, "slave_repl_offset") or 0) >= target)
        caught_up = time.time()
        cpu = replica.cpu_seconds() - cpu
        same = cli(master.port, "DBSIZE") == cli(replica.port, "DBSIZE")
        follow = {"master_rps": rps, "lag_ms": (caught_up - ended) * 1000, "applied": N / (caught_up - started),
                  "cpu_us": cpu * 1e6 / N, "same": same}
        os.kill(replica.proc.pid, signal.SIGSTOP)
        try:
            load(master.port)
        finally:
            os.kill(replica.proc.pid, signal.SIGCONT)
        started = time.time()
        target = int(info(master.port, "master_repl_offset"))
        wait_until(lambda: int(info(replica.port, "slave_repl_offset") or 0) >= target)
        follow["catch_up"] = N / (time.time() - started)
        follow["same"] = same and cli(master.port, "DBSIZE") == cli(replica.port, "DBSIZE")
        return sync, follow
    finally:
        replica.stop()
        master.stop()


def main():
    emit(f"## A replica of a Redis master ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
         f"-n {N} -r {N} -d {VALUE}, the master on /dev/shm without persistence)")
    for medium in MEDIA:
        runs = {config: [] for config in CONFIGS}
        for _ in range(REPEATS):
            for config in CONFIGS:
                runs[config].append(one_round(config, medium))
        emit(f"\n### replica on {medium}, medians of {REPEATS}\n")
        emit("| replica | keys | full sync s | sync CPU s | master SET/s while followed | lag after the last "
             "reply ms | writes applied/s | replica CPU µs/write | catch-up writes/s | same DBSIZE |")
        emit("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for config in CONFIGS:
            syncs = [s for s, _ in runs[config]]
            follows = [f for _, f in runs[config]]
            emit(f"| {config} | {syncs[0]['keys']} | {median([s['seconds'] for s in syncs]):.2f} | "
                 f"{median([s['cpu'] for s in syncs]):.2f} | {median([f['master_rps'] for f in follows]):.0f} | "
                 f"{median([f['lag_ms'] for f in follows]):.0f} | {median([f['applied'] for f in follows]):.0f} | "
                 f"{median([f['cpu_us'] for f in follows]):.2f} | {median([f['catch_up'] for f in follows]):.0f} | "
                 f"{all(f['same'] for f in follows)} |")
        if "scaledkv-sync" in runs:
            ours = runs["scaledkv-sync"]
            for peer in [c for c in CONFIGS if c != "scaledkv-sync"]:
                theirs = runs[peer]
                emit(f"\nscaledkv-sync vs {peer}: full sync time "
                     f"{ratio(median([s['seconds'] for s, _ in theirs]), median([s['seconds'] for s, _ in ours]))} "
                     f"(their time / ours), writes applied/s "
                     f"{ratio(median([f['applied'] for _, f in ours]), median([f['applied'] for _, f in theirs]))}, "
                     f"catch-up writes/s "
                     f"{ratio(median([f['catch_up'] for _, f in ours]), median([f['catch_up'] for _, f in theirs]))}")
    print(f"\nwritten to {compare_redis.REPORT}")


if __name__ == "__main__":
    main()
