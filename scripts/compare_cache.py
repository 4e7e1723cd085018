#!/usr/bin/env python3
"""Caches under the same memory limit, side by side: hit ratio, speed, CPU.

Drives every server with `scaledkv-bench cache` (crates/bench/src/cache.rs):
each operation GETs a key (YCSB's scrambled zipfian over KEYS keys of
VALUE bytes); a miss SETs it, as an application fills a look-aside cache.
WARMUP operations fill the cache, then OPERATIONS are measured, with
THREADS client threads. Servers, each limited to LIMIT_MB megabytes:

  scaledkv-mc     scaledkv-server's memcached port, --maxmemory LIMIT_MB
                  --maxmemory-policy allkeys-lru, durability DURABILITY
                  (sync, the default: every SET durable before its reply;
                  or buffered), data on MEDIUM
  memcached       memcached 1.6 -m LIMIT_MB (memory only, 4 threads)
  scaledkv-redis  scaledkv-server as above, through the Redis protocol
  redis-lru       Redis 7, maxmemory LIMIT_MB, allkeys-lru, no persistence

POLICY (allkeys-lru) is the maxmemory-policy of both servers: with
POLICY=allkeys-lfu, ScaledKV's LFU counters against Redis's.

With an SSD tier (data sets larger than memory), for CONFIGS that name
them: LIMIT_MB of memory, SSD_MB more on SSD_DIR (the repository's disk):

  scaledkv-tier   scaledkv-server's memcached port as scaledkv-mc, plus
                  --ssd-dir SSD_DIR --ssd-size SSD_MB: past LIMIT_MB the
                  oldest segments move to the disk
  memcached-ext   memcached -m LIMIT_MB -o EXTSTORE_OPTS,
                  ext_path=SSD_DIR/extstore:SSD_MB (extstore: values of
                  cold items go to the file). EXTSTORE_OPTS defaults to
                  ext_page_size=8,ext_item_age=0, tuned here (64 MB, 500k
                  keys): with memcached's defaults its item headers were
                  evicted before their values reached the file (hit ratio
                  0.496 against 0.771 with ext_item_age=0, 1 GB of file),
                  and with a 256 MB file its 64 MB pages each held a
                  quarter of it (0.499; 8 MB pages 0.686, 4 MB 0.695, 2 MB
                  0.699 at 19% fewer operations/s).

What each limit counts differs: ScaledKV's bounds its log (keys, values,
entry headers; the index's DRAM, ~60-90 B per key, comes on top),
memcached's its slabs, Redis's all its allocations. So the table also
shows each server's resident memory at the end (RssAnon + RssShmem:
ScaledKV's log on tmpfs is mapped, so it is part of it) and, apart, the
file pages it maps (RssFile: ScaledKV's SSD tier is read through the page
cache, which the kernel reclaims; extstore reads the page cache too, with
pread, so its share shows in neither column).

REPEATS rounds, servers interleaved within a round, medians. Every
process started here is stopped by its PID. Results are printed and
appended to bench-results/cache-<timestamp>.md.
"""

import os
import re
import shutil
import signal
import subprocess
import time

import compare_memcached
import compare_redis
import hoststeal
from compare_redis import REPO, SERVER, cpu_seconds, free_port, median, ratio

REPEATS = int(os.environ.get("REPEATS", "3"))
KEYS = int(os.environ.get("KEYS", "500000"))
VALUE = int(os.environ.get("VALUE", "1000"))
WARMUP = int(os.environ.get("WARMUP", "500000"))
OPERATIONS = int(os.environ.get("OPERATIONS", "500000"))
THREADS = int(os.environ.get("THREADS", "4"))
LIMITS_MB = [int(m) for m in os.environ.get("LIMIT_MB", "64 256").split()]
MEDIUM = os.environ.get("MEDIUM", "/dev/shm")
# ScaledKV's: sync (each SET durable before its reply) or buffered.
DURABILITY = os.environ.get("DURABILITY", "sync")
POLICY = os.environ.get("POLICY", "allkeys-lru")
CONFIGS = os.environ.get("CONFIGS", "scaledkv-mc memcached scaledkv-redis redis-lru").split()
KNOWN = ["scaledkv-mc", "memcached", "scaledkv-redis", "redis-lru", "scaledkv-tier", "memcached-ext"]
SSD_MB = int(os.environ.get("SSD_MB", "1024"))
SSD_DIR = os.environ.get("SSD_DIR", os.path.join(REPO, "target", "cmp-cache-ssd"))
EXTSTORE_OPTS = os.environ.get("EXTSTORE_OPTS", "ext_page_size=8,ext_item_age=0")
PEER = {"scaledkv-mc": "memcached", "scaledkv-redis": "redis-lru", "scaledkv-tier": "memcached-ext"}
BENCH = os.path.join(REPO, "target/release/scaledkv-bench")
REPORT = os.path.join(REPO, "bench-results", f"cache-{time.strftime('%Y%m%d-%H%M%S')}.md")
compare_redis.REPORT = REPORT
emit = compare_redis.emit
MEASURED = re.compile(r"^\[CACHE\] .*: ([\d.]+) ops/sec, hit ratio ([\d.]+) .* GET p50 (\d+) us, p99 (\d+) us")


def rss_mb(pid):
    """(RssAnon + RssShmem, RssFile) of `pid`, in MB."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in ("RssAnon", "RssShmem", "RssFile"):
                fields[name] = int(rest.split()[0]) / 1024
    return fields.get("RssAnon", 0) + fields.get("RssShmem", 0), fields.get("RssFile", 0)


class Server:
    def __init__(self, config, limit_mb):
        self.dir = self.ssd = None
        self.port = free_port()
        protocol_port = self.port
        if config in ("scaledkv-tier", "memcached-ext"):
            self.ssd = os.path.join(SSD_DIR, config)
            shutil.rmtree(self.ssd, ignore_errors=True)
            os.makedirs(self.ssd)
        ssd = self.ssd
        if config in ("memcached", "memcached-ext"):
            cmd = ["memcached", "-l", "127.0.0.1", "-p", str(self.port), "-U", "0", "-m", str(limit_mb)]
            if ssd:
                # memcached takes ext_page_size only before ext_path.
                cmd += ["-o", ",".join(filter(None, [EXTSTORE_OPTS, f"ext_path={ssd}/extstore:{SSD_MB}m"]))]
            if os.geteuid() == 0:
                cmd += ["-u", "root"]
            self.target = f"memcached://127.0.0.1:{self.port}"
        elif config == "redis-lru":
            self.dir = os.path.join(MEDIUM, "cmp-cache-redis")
            os.makedirs(self.dir, exist_ok=True)
            cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                   "--save", "", "--appendonly", "no", "--maxmemory", f"{limit_mb}mb",
                   "--maxmemory-policy", POLICY]
            self.target = f"redis://127.0.0.1:{self.port}/"
        else:
            self.dir = os.path.join(MEDIUM, f"cmp-cache-{config}")
            shutil.rmtree(self.dir, ignore_errors=True)
            memcached_port = free_port()
            cmd = [SERVER, "--port", str(self.port), "--memcached-port", str(memcached_port), "--dir", self.dir,
                   "--durability", DURABILITY, "--maxmemory", f"{limit_mb}mb", "--maxmemory-policy", POLICY]
            if ssd:
                cmd += ["--ssd-dir", ssd, "--ssd-size", f"{SSD_MB}mb"]
            if config in ("scaledkv-mc", "scaledkv-tier"):
                protocol_port = memcached_port
                self.target = f"memcached://127.0.0.1:{memcached_port}"
            else:
                self.target = f"redis://127.0.0.1:{self.port}/"
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env=dict(os.environ, RUST_LOG="warn"))
        if self.target.startswith("redis"):
            compare_redis.wait_ready(self.port, self.proc)
            return
        deadline = time.time() + 60
        while not compare_memcached.answers(protocol_port):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{config} did not start")
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for path in (self.dir, self.ssd):
            if path:
                shutil.rmtree(path, ignore_errors=True)


def run(config, limit_mb):
    server = Server(config, limit_mb)
    try:
        args = [BENCH, "cache", "--target", server.target, "--keys", str(KEYS), "--value-size", str(VALUE),
                "--warmup", str(WARMUP), "--threads", str(THREADS), "--operations", "0"]
        subprocess.run(args, capture_output=True, text=True, check=True, timeout=3600)
        before = cpu_seconds(server.proc.pid)
        args[args.index("--warmup") + 1] = "0"
        args[args.index("--operations") + 1] = str(OPERATIONS)
        out = subprocess.run(args + ["--seed", "8"], capture_output=True, text=True, timeout=3600)
        cpu = cpu_seconds(server.proc.pid) - before
        if out.returncode != 0:
            raise RuntimeError(f"{config}: {out.stdout}\n{out.stderr}")
        found = next(filter(None, map(MEASURED.match, out.stdout.splitlines())), None)
        if not found:
            raise RuntimeError(f"{config}: no [CACHE] line in {out.stdout}")
        rss, mapped_files = rss_mb(server.proc.pid)
        return {"ops": float(found.group(1)), "hit": float(found.group(2)), "p99": int(found.group(4)),
                "cpu_us": cpu * 1e6 / OPERATIONS, "rss": rss, "file": mapped_files}
    finally:
        server.stop()


def main():
    unknown = [c for c in CONFIGS if c not in KNOWN]
    if unknown:
        raise SystemExit(f"unknown CONFIGS {unknown}; known: {KNOWN}")
    os.makedirs(os.path.join(REPO, "bench-results"), exist_ok=True)
    for limit_mb in LIMITS_MB:
        runs = {c: [] for c in CONFIGS}
        steal_from = hoststeal.cpu_times()
        for rep in range(REPEATS):
            for config in CONFIGS:
                result = run(config, limit_mb)
                runs[config].append(result)
                print(f"  {limit_mb} MB rep {rep + 1}/{REPEATS} {config:15} hit {result['hit']:.4f} "
                      f"{result['ops']:>9,.0f} ops/s cpu {result['cpu_us']:.1f} us/op rss {result['rss']:.0f} MB "
                      f"(files {result['file']:.0f} MB)",
                      flush=True)
        emit(f"\n### {limit_mb} MB limit: {KEYS} keys of {VALUE} B ({KEYS * VALUE / 1e6:.0f} MB), zipfian, "
             f"{THREADS} threads, {WARMUP} warm-up + {OPERATIONS} measured operations, data on {MEDIUM}, "
             f"{POLICY}, ScaledKV {DURABILITY}, median of {REPEATS}"
             + (f"; SSD tier {SSD_MB} MB on {SSD_DIR}" if {"scaledkv-tier", "memcached-ext"} & set(CONFIGS) else "")
             + "\n")
        emit(f"Host CPU steal during these runs: {hoststeal.percent_since(steal_from):.1f}%\n")
        emit("| server | hit ratio | ops/s | GET p99 µs | server CPU µs/op | RSS MB | mapped files MB "
             "| ops/s vs its peer |")
        emit("|---|---:|---:|---:|---:|---:|---:|---:|")
        for config in CONFIGS:
            rs = runs[config]
            ops = median([r["ops"] for r in rs])
            base = median([r["ops"] for r in runs.get(PEER.get(config), [])])
            emit(f"| {config} | {median([r['hit'] for r in rs]):.4f} | {ops:,.0f} | "
                 f"{median([r['p99'] for r in rs]):.0f} | {median([r['cpu_us'] for r in rs]):.1f} | "
                 f"{median([r['rss'] for r in rs]):.0f} | {median([r['file'] for r in rs]):.0f} | "
                 f"{ratio(ops, base) if config in PEER else ''} |")
    print(f"\nwritten to {REPORT}")


if __name__ == "__main__":
    main()
