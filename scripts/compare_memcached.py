#!/usr/bin/env python3
"""scaledkv-server's memcached protocol vs memcached, side by side.

Runs libmemcached's `memaslap` (Debian's libmemcached-tools ships it as
`memcaslap`) with one thread and 50 connections, 16-byte keys and
1024-byte values, for TIME seconds per run, against:
  memcached        memcached 1.6 (Debian's; memory only, -m 16384 so
                   nothing is evicted, its default 4 threads)
  memcached-1t     the same with one worker thread (-t 1), as ScaledKV
                   serves with one I/O thread on 2 cores
  scaledkv-tmpfs   ScaledKV, durability sync, data on /dev/shm
  scaledkv-disk    ScaledKV, durability sync, data on the repository's disk
each on a fresh process (and data directory), REPEATS times interleaved.
Workloads (WORKLOADS):
  set       every operation a set
  get       memaslap's default mix: 90% get, 10% set (of keys it set)
  multiget  the same with gets of 16 keys at once (-d 16), memcached's
            way to batch reads
PROTOCOL=binary runs memaslap with -B (memcached's binary protocol)
instead of the text protocol.
Reported per workload and server, medians: operations/s, the server's CPU
time per operation from /proc (the load generator shares the 2 cores, so
this is the figure that decides who wins on a bigger machine), and the
ratio to memcached. ScaledKV acknowledges a set once it is durable;
memcached keeps nothing.

Every process started here is stopped by its PID. Results are printed and
appended to bench-results/memcached-<timestamp>.md.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import compare_redis
import hoststeal
from compare_redis import REPO, SERVER, cpu_seconds, free_port, median, ratio

REPEATS = int(os.environ.get("REPEATS", "3"))
TIME = int(os.environ.get("TIME", "8"))
CLIENTS = 50
KEY = 16
VALUE = 1024
CONFIGS = os.environ.get("CONFIGS", "memcached memcached-1t scaledkv-tmpfs scaledkv-disk").split()
WORKLOADS = os.environ.get("WORKLOADS", "set get multiget").split()
PROTOCOL = os.environ.get("PROTOCOL", "ascii")
MEDIA = {"scaledkv-tmpfs": "/dev/shm", "scaledkv-disk": os.path.join(REPO, "bench-data")}
REPORT = os.path.join(REPO, "bench-results", f"memcached-{time.strftime('%Y%m%d-%H%M%S')}.md")
# A/B against another build: BASELINE_SERVER=/path/to/scaledkv-server adds
# "scaledkv-base" (that binary, tmpfs).
BASELINE = os.environ.get("BASELINE_SERVER")
if BASELINE:
    MEDIA["scaledkv-base"] = "/dev/shm"
# compare_redis's `emit`, writing this script's report.
compare_redis.REPORT = REPORT
emit = compare_redis.emit


def answers(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"version\r\n")
            return s.recv(64).startswith(b"VERSION ")
    except OSError:
        return False


class Server:
    def __init__(self, config):
        self.dir = None
        self.port = free_port()
        if config.startswith("memcached"):
            cmd = ["memcached", "-l", "127.0.0.1", "-p", str(self.port), "-U", "0", "-m", "16384"]
            if config == "memcached-1t":
                cmd += ["-t", "1"]
            if os.geteuid() == 0:
                cmd += ["-u", "root"]
        else:
            self.dir = os.path.join(MEDIA[config], f"cmp-memcached-{config}")
            shutil.rmtree(self.dir, ignore_errors=True)
            binary = BASELINE if config == "scaledkv-base" else SERVER
            cmd = [binary, "--port", str(free_port()), "--memcached-port", str(self.port), "--dir", self.dir,
                   "--durability", "sync"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env=dict(os.environ, RUST_LOG="warn"))
        deadline = time.time() + 60
        while not answers(self.port):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{config} did not start")
            time.sleep(0.05)

    def cpu_seconds(self):
        return cpu_seconds(self.proc.pid)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def memaslap_config(get_share):
    """memaslap's -F file: key and value sizes, then the command mix."""
    f = tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False)
    f.write(f"key\n{KEY} {KEY} 1\nvalue\n{VALUE} {VALUE} 1\ncmd\n0 {1 - get_share}\n1 {get_share}\n")
    f.close()
    return f.name


def bench(server, workload):
    config = memaslap_config(0.0 if workload == "set" else 0.9)
    cmd = ["memcaslap", "-s", f"127.0.0.1:{server.port}", "-T", "1", "-c", str(CLIENTS), "-t", f"{TIME}s",
           "-F", config]
    if workload == "multiget":
        cmd += ["-d", "16"]
    if PROTOCOL == "binary":
        cmd += ["-B"]
    before = server.cpu_seconds()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIME + 60)
    cpu = server.cpu_seconds() - before
    os.unlink(config)
    found = re.search(r"Ops: (\d+) TPS: (\d+)", out.stdout)
    if not found:
        raise RuntimeError(f"memaslap said: {out.stdout}\n{out.stderr}")
    ops, tps = int(found.group(1)), int(found.group(2))
    gets = re.search(r"cmd_get: (\d+)", out.stdout)
    misses = re.search(r"get_misses: (\d+)", out.stdout)
    miss = int(misses.group(1)) / int(gets.group(1)) if gets and misses and int(gets.group(1)) else 0.0
    return {"tps": tps, "cpu_us": cpu * 1e6 / max(ops, 1), "miss": miss}


def main():
    os.makedirs(MEDIA["scaledkv-disk"], exist_ok=True)
    emit(f"## memcached {PROTOCOL} protocol: memaslap -T 1 -c {CLIENTS}, keys {KEY} B, values {VALUE} B, {TIME} s per run, "
         f"median of {REPEATS} interleaved ({time.strftime('%Y-%m-%d %H:%M')})\n")
    for workload in WORKLOADS:
        runs = {c: [] for c in CONFIGS}
        steal_from = hoststeal.cpu_times()
        for rep in range(REPEATS):
            for config in CONFIGS:
                server = Server(config)
                try:
                    result = bench(server, workload)
                finally:
                    server.stop()
                runs[config].append(result)
                print(f"  {workload} rep {rep + 1}/{REPEATS} {config:15} {result['tps']:>9,} ops/s  "
                      f"cpu {result['cpu_us']:.2f} us/op  get misses {result['miss']:.1%}", flush=True)
        peers = [c for c in CONFIGS if c.startswith("memcached")]
        bases = [median([r["tps"] for r in runs[peer]]) for peer in peers]
        emit(f"\n### {workload} (host CPU steal {hoststeal.percent_since(steal_from):.1f}%)\n")
        emit("| server | ops/s | server CPU µs/op | get misses |" + "".join(f" vs {p} |" for p in peers))
        emit("|---|---:|---:|---:|" + "---:|" * len(peers))
        for config in CONFIGS:
            rs = runs[config]
            tps = median([r["tps"] for r in rs])
            emit(f"| {config} | {tps:,.0f} | {median([r['cpu_us'] for r in rs]):.2f} | "
                 f"{median([r['miss'] for r in rs]):.1%} |" + "".join(f" {ratio(tps, b)} |" for b in bases))
        emit("\nEach run (ops/s): " + "; ".join(
            f"{c} " + ", ".join(f"{r['tps']:,}" for r in runs[c]) for c in CONFIGS))


if __name__ == "__main__":
    main()
