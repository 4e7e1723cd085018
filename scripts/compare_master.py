#!/usr/bin/env python3
"""Replicas of a ScaledKV master against replicas of a Redis master.

Pairs of servers (master+replica), each on a fresh data directory on the
medium:
  redis-none+redis-none       Redis 7 master and replica, no persistence
  redis-always+redis-always   Redis 7 master and replica, appendfsync always
  scaledkv+redis-none         ScaledKV master (sync), Redis replica
  scaledkv+scaledkv           ScaledKV master and replica (sync)
and, as the price of having a replica, each master alone (`+none`). For
each: N SETs of VALUE bytes (-r N) into the master, then REPLICAOF and
the time until the link is up (full sync); then
`redis-benchmark -t set -n N -r N -c 50 -d VALUE -P P` against the master
while the replica follows: the master's SET/s and CPU µs per SET, the lag
from the last reply until WAIT 1 says the replica has every write, and
whether both hold the same number of keys then. REPEATS times, interleaved;
medians. Master, replica and redis-benchmark share the machine's cores.

Every process started here is stopped by its PID. Results are printed and
appended to bench-results/master-<timestamp>.md.
"""

import os
import time

import compare_redis
from compare_redis import cli, info, wait_until, Server, emit, median, ratio

QUICK = os.environ.get("QUICK") == "1"
REPEATS = int(os.environ.get("REPEATS", "1" if QUICK else "3"))
N = int(os.environ.get("N", "100000" if QUICK else "300000"))
VALUE = int(os.environ.get("VALUE", "1024"))
PIPELINES = [int(p) for p in os.environ.get("PIPELINES", "16 1").split()]
MEDIA = os.environ.get("MEDIA", f"/dev/shm {compare_redis.REPO}/bench-data").split()
# WORKLOAD=hset: HSETs into one hash of up to FIELDS fields instead of
# SETs (what a write to a big collection costs with a replica);
# WORKLOAD=lpush: LPUSHes onto one list that grows to N elements;
# WORKLOAD=xadd: XADDs to one stream that grows to N entries;
# WORKLOAD=xreadgroup: a stream of N entries loaded first, then
# XREADGROUP ... COUNT 1 ... > by one consumer group, an entry each (its
# group and pending entries change, the stream does not).
WORKLOAD = os.environ.get("WORKLOAD", "set")
FIELDS = int(os.environ.get("FIELDS", "10000"))
PAIRS = os.environ.get("PAIRS", "redis-none+none redis-none+redis-none redis-always+redis-always "
                                "scaledkv-sync+none scaledkv-sync+redis-none scaledkv-sync+scaledkv-sync").split()
compare_redis.REPORT = os.path.join(compare_redis.REPO, "bench-results",
                                    f"master-{time.strftime('%Y%m%d-%H%M%S')}.md")


def load(port, n, pipeline=16):
    compare_redis.subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set", "-n", str(n), "-r", str(n),
                                  "-d", str(VALUE), "-c", "50", "-P", str(pipeline), "-q"],
                                 capture_output=True, check=True)


def one_round(pair, medium, pipeline):
    master_config, replica_config = pair.split("+")
    master = Server(master_config, medium)
    replica = None
    try:
        if master_config.startswith("redis"):
            cli(master.port, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
            cli(master.port, "CONFIG", "SET", "repl-diskless-sync", "yes")
        load(master.port, N)
        if WORKLOAD == "xreadgroup":
            compare_redis.subprocess.run(["redis-benchmark", "-p", str(master.port), "-n", str(N), "-c", "50",
                                          "-P", "16", "xadd", "big-stream", "*", "field", "v" * VALUE],
                                         capture_output=True, check=True)
            cli(master.port, "XGROUP", "CREATE", "big-stream", "readers", "0")
        result = {"keys": int(cli(master.port, "DBSIZE"))}
        if replica_config != "none":
            # A directory of its own: Server's is named by the configuration.
            os.makedirs(os.path.join(medium, "replica"), exist_ok=True)
            replica = Server(replica_config, os.path.join(medium, "replica"))
            started = time.time()
            cli(replica.port, "REPLICAOF", "127.0.0.1", master.port)
            wait_until(lambda: info(replica.port, "master_link_status") == "up")
            result["sync_s"] = time.time() - started
        if WORKLOAD == "hset":
            # One big hash written in place: FIELDS fields of VALUE bytes.
            command = ["hset", "big-hash", "field:__rand_int__", "v" * VALUE]
            args = ["-r", str(FIELDS), "-c", "50", "-P", str(pipeline)] + command
        elif WORKLOAD == "lpush":
            args = ["-c", "50", "-P", str(pipeline), "lpush", "big-list", "v" * VALUE]
        elif WORKLOAD == "xadd":
            args = ["-c", "50", "-P", str(pipeline), "xadd", "big-stream", "*", "field", "v" * VALUE]
        elif WORKLOAD == "xreadgroup":
            args = ["-c", "50", "-P", str(pipeline), "xreadgroup", "group", "readers", "reader", "count", "1",
                    "streams", "big-stream", ">"]
        else:
            args = ["-t", "set", "-r", str(N), "-c", "50", "-d", str(VALUE), "-P", str(pipeline)]
        run = compare_redis.run_benchmark(master, N, args)
        result.update(rps=run["rps"], cpu_us=run["cpu_us"], p99=run["p99"])
        if replica:
            # WAIT: the replica acknowledged every write the master took
            # (a ScaledKV master's stream may not hold the last ones yet).
            ended = time.time()
            if cli(master.port, "WAIT", 1, 600000) != "1":
                raise RuntimeError(f"{pair}: the replica did not acknowledge")
            result["lag_ms"] = (time.time() - ended) * 1000
            result["same"] = all(cli(master.port, *words) == cli(replica.port, *words)
                                 for words in [("DBSIZE",), ("HLEN", "big-hash"),
                                                                   ("XPENDING", "big-stream", "readers")])
        return result
    finally:
        if replica:
            replica.stop()
        master.stop()


def cell(results, field, fmt):
    values = [r[field] for r in results if field in r]
    return fmt.format(median(values)) if values else "—"


def main():
    what = {"hset": f"HSET into one hash of up to {FIELDS} fields", "lpush": "LPUSH onto one list",
            "xadd": "XADD to one stream",
            "xreadgroup": "XREADGROUP of one entry from one stream"}.get(WORKLOAD, f"SET -r {N}")
    emit(f"## Replicas of a master ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
         f"{what}, -n {N}, {VALUE}-byte values, -c 50)")
    for medium in MEDIA:
        for pipeline in PIPELINES:
            runs = {pair: [] for pair in PAIRS}
            for _ in range(REPEATS):
                for pair in PAIRS:
                    runs[pair].append(one_round(pair, medium, pipeline))
            emit(f"\n### {medium}, -P {pipeline}, medians of {REPEATS}\n")
            emit("| master+replica | keys | full sync s | master SET/s | p99 ms | master CPU µs/SET | replica lag "
                 "after the last reply ms | same DBSIZE |")
            emit("| --- | --- | --- | --- | --- | --- | --- | --- |")
            for pair in PAIRS:
                results = runs[pair]
                same = all(r.get("same", True) for r in results)
                emit(f"| {pair} | {results[0]['keys']} | {cell(results, 'sync_s', '{:.2f}')} | "
                     f"{cell(results, 'rps', '{:.0f}')} | {cell(results, 'p99', '{:.3f}')} | "
                     f"{cell(results, 'cpu_us', '{:.2f}')} | "
                     f"{cell(results, 'lag_ms', '{:.0f}')} | {same} |")
            rps = {pair: median([r["rps"] for r in runs[pair]]) for pair in PAIRS}
            syncs = {pair: median([r["sync_s"] for r in runs[pair] if "sync_s" in r] or [0]) for pair in PAIRS}
            for ours, theirs in [("scaledkv-sync+redis-none", "redis-none+redis-none"),
                                 ("scaledkv-sync+scaledkv-sync", "redis-none+redis-none"),
                                 ("scaledkv-sync+scaledkv-sync", "redis-always+redis-always"),
                                 ("scaledkv-sync+none", "redis-none+none")]:
                if ours in rps and theirs in rps:
                    line = f"\n{ours} vs {theirs}: master SET/s {ratio(rps[ours], rps[theirs])}"
                    if syncs.get(ours) and syncs.get(theirs):
                        line += f", full sync time {ratio(syncs[theirs], syncs[ours])} (their time / ours)"
                    emit(line)
            for alone in [p for p in PAIRS if p.endswith("+none")]:
                master_config = alone.split("+")[0]
                for pair in [p for p in PAIRS if p.startswith(master_config + "+") and p != alone]:
                    emit(f"\n{pair}: the master's SET/s with the replica {ratio(rps[pair], rps[alone])} of alone")
    print(f"\nwritten to {compare_redis.REPORT}")


if __name__ == "__main__":
    main()
