#!/usr/bin/env python3
"""`redis-cli --rdb` from scaledkv-server and from redis-server, side by side.

Each server takes N SETs of VALUE bytes (-r N: about 63% distinct keys,
redis-benchmark -P 16 -c 50), then `redis-cli --rdb` writes its RDB file
onto the same medium:
  redis-none     Redis 7 without persistence (a forked child writes the
                 file into the socket: repl-diskless-sync, no delay)
  scaledkv-sync  ScaledKV, durability sync (an engine snapshot read on a
                 blocking thread while the server serves on)
and the script reports the transfer's time, the file's size, and the
server's CPU for it (a forked child's included, from /proc), then checks
the file with redis-check-rdb. With LOADED=1 it also times a second
export while redis-benchmark writes (SET -P 16), and the SET/s it got
meanwhile against the same writes without an export.

REPEATS runs of each, interleaved, on a fresh server and data directory
on each medium; medians. Every process started here is stopped by its
PID. Results are printed and appended to bench-results/export-<timestamp>.md.
"""

import os
import subprocess
import time

import compare_redis
from compare_redis import cli, CLK_TCK, Server, emit, median, ratio

QUICK = os.environ.get("QUICK") == "1"
REPEATS = int(os.environ.get("REPEATS", "1" if QUICK else "3"))
N = int(os.environ.get("N", "100000" if QUICK else "500000"))
VALUE = int(os.environ.get("VALUE", "1024"))
MEDIA = os.environ.get("MEDIA", f"/dev/shm {compare_redis.REPO}/bench-data").split()
CONFIGS = os.environ.get("CONFIGS", "redis-none scaledkv-sync").split()
LOADED = os.environ.get("LOADED") == "1"
IMPORT = os.environ.get("IMPORT") == "1"
compare_redis.REPORT = os.path.join(compare_redis.REPO, "bench-results",
                                    f"export-{time.strftime('%Y%m%d-%H%M%S')}.md")


def cpu_with_children(pid):
    """CPU seconds of `pid` and of its reaped children (Redis's fork)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLK_TCK


def set_load(port, n):
    return subprocess.Popen(["redis-benchmark", "-p", str(port), "-t", "set", "-n", str(n), "-r", str(N),
                             "-d", str(VALUE), "-c", "50", "-P", "16", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def rps_of(output):
    # "SET: 123456.79 requests per second, p50=..."
    for part in output.replace("\r", "\n").split("\n"):
        if part.startswith("SET:") and "requests per second" in part:
            return float(part.split()[1])
    raise RuntimeError(f"no SET rate in {output!r}")


def export(server, path):
    if os.path.exists(path):
        os.remove(path)
    cpu, started = cpu_with_children(server.proc.pid), time.time()
    out = subprocess.run(["redis-cli", "-p", str(server.port), "--rdb", path], capture_output=True, text=True,
                         timeout=600)
    seconds = time.time() - started
    # Redis's child is reaped a moment after the transfer ends.
    time.sleep(0.2)
    cpu = cpu_with_children(server.proc.pid) - cpu
    if "Transfer finished with success" not in out.stderr:
        raise RuntimeError(f"redis-cli --rdb failed: {out.stderr}")
    return seconds, cpu, os.path.getsize(path)


def one_round(config, medium):
    server = Server(config, medium)
    path = os.path.join(medium, f"export-{config}.rdb")
    try:
        if config.startswith("redis"):
            cli(server.port, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
        set_load(server.port, N).communicate()
        keys = int(cli(server.port, "DBSIZE"))
        seconds, cpu, size = export(server, path)
        check = subprocess.run(["redis-check-rdb", path], capture_output=True, text=True)
        ok = "RDB looks OK" in check.stdout and f"{keys} keys read" in check.stdout
        result = {"keys": keys, "seconds": seconds, "cpu": cpu, "mb": size / 1e6, "ok": ok}
        if LOADED:
            alone = rps_of(set_load(server.port, N).communicate()[0])
            writer = set_load(server.port, N)
            time.sleep(0.5)
            result["loaded_seconds"] = export(server, path)[0]
            result["rps_alone"], result["rps_during"] = alone, rps_of(writer.communicate()[0])
        return result
    finally:
        server.stop()
        if os.path.exists(path):
            os.remove(path)


def started_on(cmd, port):
    """Seconds and CPU seconds from starting `cmd` until it answers PING."""
    started = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, RUST_LOG="warn"))
    try:
        compare_redis.wait_ready(port, proc, timeout=600)
        return time.time() - started, cpu_with_children(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def import_round(medium):
    """Redis's dump.rdb of N SETs: Redis loading it, ScaledKV importing it."""
    source = Server("redis-none", medium)
    work = os.path.join(medium, "import-work")
    subprocess.run(["rm", "-rf", work])
    os.makedirs(work)
    path = os.path.join(work, "dump.rdb")
    try:
        cli(source.port, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
        set_load(source.port, N).communicate()
        keys = int(cli(source.port, "DBSIZE"))
        export(source, path)
    finally:
        source.stop()
    try:
        port = compare_redis.free_port()
        redis = started_on(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", work,
                            "--dbfilename", "dump.rdb", "--save", "", "--appendonly", "no"], port)
        port = compare_redis.free_port()
        ours = started_on([compare_redis.SERVER, "--port", str(port), "--dir", os.path.join(work, "skv"),
                           "--durability", "sync", "--import-rdb", path], port)
        return {"keys": keys, "redis": redis, "scaledkv": ours}
    finally:
        subprocess.run(["rm", "-rf", work])


def main():
    emit(f"## redis-cli --rdb ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
         f"-n {N} -r {N} -d {VALUE})")
    # CONFIGS= (empty) with IMPORT=1: the loading comparison alone.
    for medium in MEDIA if CONFIGS else []:
        runs = {config: [] for config in CONFIGS}
        for _ in range(REPEATS):
            for config in CONFIGS:
                runs[config].append(one_round(config, medium))
        emit(f"\n### {medium}, medians of {REPEATS}\n")
        extra = " | export under SET load s | SET/s alone | SET/s during the export" if LOADED else ""
        emit(f"| server | keys | export s | server CPU s | file MB | redis-check-rdb OK{extra} |")
        emit("| --- | --- | --- | --- | --- | ---" + (" | --- | --- | ---" if LOADED else "") + " |")
        for config in CONFIGS:
            rs = runs[config]
            line = (f"| {config} | {rs[0]['keys']} | {median([r['seconds'] for r in rs]):.2f} | "
                    f"{median([r['cpu'] for r in rs]):.2f} | {median([r['mb'] for r in rs]):.1f} | "
                    f"{all(r['ok'] for r in rs)}")
            if LOADED:
                line += (f" | {median([r['loaded_seconds'] for r in rs]):.2f} | "
                         f"{median([r['rps_alone'] for r in rs]):.0f} | {median([r['rps_during'] for r in rs]):.0f}")
            emit(line + " |")
        if "scaledkv-sync" in runs:
            ours = runs["scaledkv-sync"]
            for peer in [c for c in CONFIGS if c != "scaledkv-sync"]:
                theirs = runs[peer]
                emit(f"\nscaledkv-sync vs {peer}: export time "
                     f"{ratio(median([r['seconds'] for r in theirs]), median([r['seconds'] for r in ours]))} "
                     f"(their time / ours), CPU "
                     f"{ratio(median([r['cpu'] for r in theirs]), median([r['cpu'] for r in ours]))} (theirs / ours)")
    if IMPORT:
        for medium in MEDIA:
            rounds = [import_round(medium) for _ in range(REPEATS)]
            emit(f"\n### Loading Redis's file on {medium}, medians of {REPEATS} ({rounds[0]['keys']} keys)\n")
            emit("| server | seconds until it answers | CPU s |")
            emit("| --- | --- | --- |")
            for name, label in [("redis", "redis-server on the file"), ("scaledkv", "scaledkv-server --import-rdb")]:
                emit(f"| {label} | {median([r[name][0] for r in rounds]):.2f} | "
                     f"{median([r[name][1] for r in rounds]):.2f} |")
    print(f"\nwritten to {compare_redis.REPORT}")


if __name__ == "__main__":
    main()
