#!/usr/bin/env python3
"""Runs db_bench workloads on ScaledKV and RocksDB, one after the other, on
the same medium with the same sizes, REPEATS times, and prints medians and
ScaledKV/RocksDB throughput ratios as Markdown tables.

Peers (each gets its own fresh database directory on the same medium):
  skv-buffered  ScaledKV durability=buffered   (pairs with RocksDB WAL, sync=0)
  skv-sync      ScaledKV durability=sync       (pairs with RocksDB sync=1)
  skv-pmem      ScaledKV durability=pmem       (tmpfs only)
  deb-*         Debian's db_bench 7.8 (assertions enabled: flatters ratios)
  rel-*         release RocksDB via the rust `rocksdb` crate (11.x)
"""
import os, re, shutil, statistics, subprocess, sys, time

import hoststeal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKV = os.path.join(ROOT, "target/release/scaledkv-bench")
REL = os.path.join(ROOT, "target/rocksdb/release/scaledkv-bench")
QUICK = os.environ.get("QUICK") == "1"
REPEATS = int(os.environ.get("REPEATS", "1" if QUICK else "3"))
MEDIA = os.environ.get("MEDIA", f"/dev/shm {ROOT}/bench-data").split()
SHAPES = [(16, 1024, 1_000_000), (8, 256, 4_000_000)]
if QUICK:
    SHAPES = [(16, 1024, 50_000), (8, 256, 200_000)]
if os.environ.get("SHAPES"):  # e.g. SHAPES=16:1024:1000000,8:256:4000000
    SHAPES = [tuple(int(x) for x in shape.split(":")) for shape in os.environ["SHAPES"].split(",")]
# Durable fills: 500,000 writes on tmpfs (50,000 took ~50 ms per run there,
# too short to measure), 50,000 on the disk, where RocksDB sync=1 manages
# ~5k writes/s. DURABLE_NUM overrides both.
def durable_num(medium):
    if os.environ.get("DURABLE_NUM"):
        return int(os.environ["DURABLE_NUM"])
    if QUICK:
        return 5000
    return 500_000 if medium.startswith("/dev/shm") else 50_000


# ENGINES (optional): comma-separated peer names to run, see only() below.
READS = lambda num: min(num, 1_000_000)
LINE = re.compile(r"^(\w+)\s*:\s*([\d.]+) micros/op (\d+) ops/sec")
SPACE_AMP = re.compile(r"space-amp=([\d.]+)")
# (medium, ks, vs) -> engine -> [disk bytes ÷ user bytes after overwrite]; for
# ScaledKV also its own log ÷ live figure under "<name> (log÷live)".
SPACE = {}


def engines(medium):
    out = {"skv-buffered": ("skv", ["--durability=buffered"]),
           "deb-wal": ("deb", ["--sync=0", "--disable_wal=0"]),
           "deb-nowal": ("deb", ["--disable_wal=1"])}
    if os.path.exists(REL):
        out["rel-wal"] = ("rel", ["--sync=0", "--disable_wal=0"])
        out["rel-nowal"] = ("rel", ["--disable_wal=1"])
    return out


def durable_engines(medium):
    out = {"skv-sync": ("skv", ["--durability=sync"]), "deb-sync": ("deb", ["--sync=1"])}
    if medium.startswith("/dev/shm"):
        out["skv-pmem"] = ("skv", ["--durability=pmem"])
    if os.path.exists(REL):
        out["rel-sync"] = ("rel", ["--sync=1"])
    return out


def command(kind, extra, common):
    if kind == "skv":
        return [SKV, "--progress=never"] + common + extra
    if kind == "rel":
        return [REL, "--engine=rocksdb", "--progress=never", "--cache_size=8589934592"] + common + extra
    return ["db_bench", "--compression_type=none", "--cache_size=8589934592", "--histogram=1",
            "--statistics=0"] + per_thread(common) + extra


def per_thread(common):
    """db_bench counts --reads and a fill's writes per thread, scaledkv-bench
    in total: give db_bench each thread's share (a fill's share as --writes,
    so that the key range stays --num) so that both do the same work."""
    threads = next((int(a.split("=")[1]) for a in common if a.startswith("--threads=")), 1)
    if threads == 1:
        return common
    out = []
    for a in common:
        name, _, value = a.partition("=")
        if name == "--reads":
            a = f"--reads={max(1, int(value) // threads)}"
        elif name == "--num" and any(b.startswith("--benchmarks=fill") for b in common):
            out.append(f"--writes={max(1, int(value) // threads)}")
        out.append(a)
    return out


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stdout}\n{done.stderr}")
    results = {}
    for line in done.stdout.splitlines():
        m = LINE.match(line)
        if m:
            results[m.group(1)] = int(m.group(3))
        m = SPACE_AMP.search(line)
        if m:
            results["_space_amp"] = float(m.group(1))  # the last stats line wins
    return results


def disk_bytes(path):
    """Bytes allocated to the files under `path` (what `du` counts)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def phases(ks, vs, num, db):
    base = [f"--key_size={ks}", f"--value_size={vs}", f"--num={num}", f"--db={db}"]
    reads = READS(num)
    return [
        ("fillseq", base + ["--benchmarks=fillseq", "--use_existing_db=0"]),
        ("fillrandom", base + ["--benchmarks=fillrandom", "--use_existing_db=0"]),
        ("overwrite", base + ["--benchmarks=overwrite,readrandom,readseq", f"--reads={reads}", "--use_existing_db=1"]),
        ("readrandom-2t", base + ["--benchmarks=readrandom", f"--reads={reads}", "--threads=2", "--use_existing_db=1"]),
        ("seekrandom", base + ["--benchmarks=seekrandom", f"--reads={min(reads, 100_000)}", "--seek_nexts=100",
                               "--use_existing_db=1"]),
    ]


def measure(medium, ks, vs, num, peers, phase_list, results):
    for rep in range(REPEATS):
        for name, (kind, extra) in peers.items():
            db = os.path.join(medium, f"cmp-{name}")
            shutil.rmtree(db, ignore_errors=True)
            for phase, common in phase_list(db):
                if kind != "skv" and "--durability" in " ".join(extra):
                    continue
                if not medium.startswith("/dev/shm"):
                    # Each run starts with no writeback in flight: the last
                    # run's (another engine's, or a removed database's)
                    # would share the 2 cores and the device with this one.
                    os.sync()
                measured = run(command(kind, extra, common))
                if phase == "overwrite":
                    # After overwrite + readrandom + readseq: GC and compaction
                    # had the reads' time to catch up.
                    space = SPACE.setdefault((medium, ks, vs), {})
                    space.setdefault(name, []).append(disk_bytes(db) / (num * (ks + vs)))
                    if "_space_amp" in measured:
                        space.setdefault(f"{name} (log÷live)", []).append(measured["_space_amp"])
                measured.pop("_space_amp", None)
                for bench, ops in measured.items():
                    label = bench + ("-2t" if phase == "readrandom-2t" else "")
                    label += "-16t" if "--threads=16" in common else ""
                    results.setdefault((medium, ks, vs, label), {}).setdefault(name, []).append(ops)
            shutil.rmtree(db, ignore_errors=True)
        print(f"  {medium} {ks}B/{vs}B rep {rep + 1}/{REPEATS} done", file=sys.stderr)


def durable_phases(ks, vs, num):
    def f(db):
        base = [f"--key_size={ks}", f"--value_size={vs}", f"--num={num}", f"--db={db}", "--use_existing_db=0"]
        return [("fill-1t", base + ["--benchmarks=fillrandom", "--threads=1"]),
                ("fill-16t", base + ["--benchmarks=fillrandom", "--threads=16"])]
    return f


def table(results, pairs, title, out):
    out.append(f"\n### {title}\n")
    out.append("| medium | key/value | benchmark | " + " | ".join(f"{a} ÷ {b}" for a, b in pairs) + " | medians (ops/s) |")
    out.append("|" + "---|" * (4 + len(pairs)))
    for (medium, ks, vs, bench), by in sorted(results.items()):
        med = {n: statistics.median(v) for n, v in by.items()}
        ratios = [f"{med[a] / med[b]:.2f}×" if a in med and b in med and med[b] else "—" for a, b in pairs]
        if all(r == "—" for r in ratios):
            continue
        meds = ", ".join(f"{n} {int(v):,}" for n, v in sorted(med.items()))
        out.append(f"| {'tmpfs' if medium.startswith('/dev/shm') else 'disk'} | {ks}/{vs} | {bench} | "
                   + " | ".join(ratios) + f" | {meds} |")


STEAL_FROM = hoststeal.cpu_times()


def report(plain, durable, started, complete):
    """The tables so far; rewritten after every shape so a cut-off run keeps
    what it measured."""
    host = subprocess.run(["uname", "-srm"], capture_output=True, text=True).stdout.strip()
    out = [f"# compare-rocksdb: {time.strftime('%Y-%m-%d')}, {host}, {os.cpu_count()} cores, "
           f"medians of {REPEATS} runs, {time.time() - started:.0f} s" + ("" if complete else " (partial)"),
           f"\nHost CPU steal during the run: {hoststeal.percent_since(STEAL_FROM):.1f}%"]
    table(plain, [("skv-buffered", "rel-wal"), ("skv-buffered", "rel-nowal"),
                  ("skv-buffered", "deb-wal"), ("skv-buffered", "deb-nowal")],
          "Buffered ScaledKV vs RocksDB WAL sync=0 and disable_wal=1", out)
    table(durable, [("skv-sync", "rel-sync"), ("skv-pmem", "rel-sync"), ("skv-sync", "deb-sync"),
                    ("skv-pmem", "deb-sync")],
          "Durable writes (fillrandom; " + ", ".join(f"{durable_num(m):,} keys on {m}" for m in MEDIA)
          + "): ScaledKV sync/pmem vs RocksDB sync=1", out)
    if SPACE:
        out.append("\n### Space after overwrite (+ readrandom, readseq): bytes on the medium ÷ keys × (key + value)\n")
        out.append("| medium | key/value | medians |")
        out.append("|---|---|---|")
        for (medium, ks, vs), by in sorted(SPACE.items()):
            meds = ", ".join(f"{n} {statistics.median(v):.2f}" for n, v in sorted(by.items()))
            out.append(f"| {'tmpfs' if medium.startswith('/dev/shm') else 'disk'} | {ks}/{vs} | {meds} |")
    os.makedirs(os.path.dirname(REPORT), exist_ok=True)
    with open(REPORT, "w") as f:
        f.write("\n".join(out) + "\n")
    return "\n".join(out)


REPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench-results",
                      f"rocksdb-{time.strftime('%Y%m%d-%H%M%S')}.md")


def only(peers):
    """ENGINES=skv-buffered,rel-wal,... keeps just those peers (e.g. to skip
    Debian's slow assertion-enabled db_bench when time is short)."""
    wanted = os.environ.get("ENGINES")
    return {n: p for n, p in peers.items() if not wanted or n in wanted.split(",")}


def main():
    started = time.time()
    plain, durable = {}, {}
    for medium in MEDIA:
        os.makedirs(medium, exist_ok=True)
        for ks, vs, num in SHAPES:
            measure(medium, ks, vs, num, only(engines(medium)), lambda db, k=ks, v=vs, n=num: phases(k, v, n, db), plain)
            n = durable_num(medium)
            measure(medium, ks, vs, n, only(durable_engines(medium)), durable_phases(ks, vs, n), durable)
            report(plain, durable, started, complete=False)
            print(f"  tables so far in {REPORT}", file=sys.stderr)
    print(report(plain, durable, started, complete=True))


if __name__ == "__main__":
    main()
