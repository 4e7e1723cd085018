#!/usr/bin/env python3
"""scaledkv-server vs redis-server under redis-benchmark, side by side.

For each medium (tmpfs and the real disk) and pipeline depth (-P 1, -P 16),
runs `redis-benchmark -t set,get -n N -r N -c 50 -d 1024` against:
  redis-none      Redis 7, no persistence (--save "" --appendonly no)
  redis-everysec  Redis 7, AOF, appendfsync everysec
  redis-always    Redis 7, AOF, appendfsync always (every write durable)
  scaledkv-sync   ScaledKV, durability sync (every write durable)
each on a fresh data directory on that medium, REPEATS times interleaved,
and reports medians: requests/s, p50/p99 latency, and the server's CPU time
per request from /proc (the load generator shares the 2 cores, so this is
the figure that decides who wins on a bigger machine).

Then the original research's experiment: `redis-benchmark -t set -r 100000
-n N` for N = 1e3 .. 1e6, durable ScaledKV vs Redis with RDB snapshots and
with AOF (always).

UNIX_SOCKET=1 runs redis-benchmark over each server's Unix socket
(`--unixsocket`, `redis-benchmark -s`) instead of TCP; TLS=1 over TLS
(`--tls-port` with a CA, server and client certificates openssl makes
here; `redis-benchmark --tls`).

Every process started here is stopped by its PID. Results are printed and
appended to bench-results/redis-<timestamp>.md as each table completes.
"""

import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

import hoststeal

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = os.environ.get("QUICK") == "1"
REPEATS = int(os.environ.get("REPEATS", "1" if QUICK else "3"))
N = int(os.environ.get("N", "100000" if QUICK else "1000000"))
MEDIA = os.environ.get("MEDIA", f"/dev/shm {REPO}/bench-data").split()
PIPELINES = [int(p) for p in os.environ.get("PIPELINES", "1 16").split()]
SERIES = [int(n) for n in os.environ.get("SERIES", "1000 10000 100000" if QUICK else "1000 10000 100000 1000000").split()]
# Set SERIES="" to skip the original experiment.
CLIENTS = 50
VALUE = 1024
UNIX_SOCKET = os.environ.get("UNIX_SOCKET") == "1"
TLS = os.environ.get("TLS") == "1"
_CERTS = {}


def tls_certs():
    """A CA and the server's and client's certificates it signed (PEM
    files, made once per run with openssl): {name: path}."""
    if not _CERTS:
        d = os.path.join(REPO, "bench-results", "tls-certs")
        os.makedirs(d, exist_ok=True)
        run = lambda *args: subprocess.run(args, cwd=d, check=True, capture_output=True)
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=bench-ca")
        for name in ("server", "client"):
            run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}")
            with open(os.path.join(d, "san.ext"), "w") as f:
                f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
            run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", "san.ext")
        _CERTS.update({n: os.path.join(d, n) for n in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")})
    return _CERTS
SERVER = os.path.join(REPO, "target/release/scaledkv-server")
CLK_TCK = os.sysconf("SC_CLK_TCK")

CONFIGS = {
    "redis-none": ["--save", "", "--appendonly", "no"],
    "redis-everysec": ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"],
    "redis-always": ["--save", "", "--appendonly", "yes", "--appendfsync", "always"],
    "redis-rdb": ["--appendonly", "no", "--save", "3600 1 300 100 60 10000"],
    "scaledkv-sync": [],
    "scaledkv-sync-1t": ["--threads", "1"],
    "scaledkv-sync-2t": ["--threads", "2"],
}
# A/B against another build: BASELINE_SERVER=/path/to/scaledkv-server adds
# the configuration "scaledkv-base" (that binary, `sync`, default threads).
BASELINE = os.environ.get("BASELINE_SERVER")
if BASELINE:
    CONFIGS["scaledkv-base"] = []
MAIN = os.environ.get("CONFIGS", "redis-none redis-everysec redis-always scaledkv-sync").split()
SERIES_CONFIGS = ["redis-rdb", "redis-always", "scaledkv-sync"]

STAMP = time.strftime("%Y%m%d-%H%M%S")
REPORT = os.path.join(REPO, "bench-results", f"redis-{STAMP}.md")


def emit(text=""):
    print(text, flush=True)
    os.makedirs(os.path.dirname(REPORT), exist_ok=True)
    with open(REPORT, "a") as f:
        f.write(text + "\n")


def cpu_seconds(pid):
    """User plus system CPU seconds of process `pid`, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def resp_command(*words):
    """`words` (bytes, or anything str() spells) as a RESP request."""
    out = [b"*%d\r\n" % len(words)]
    for word in words:
        word = word if isinstance(word, bytes) else str(word).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(word), word))
    return b"".join(out)


def cli(port, *words):
    """redis-cli's answer to `words` on `port`, stripped."""
    out = subprocess.run(["redis-cli", "-p", str(port)] + [str(w) for w in words],
                         capture_output=True, text=True, check=True, timeout=60)
    return out.stdout.strip()


def info(port, field, section="replication"):
    """One field of INFO `section` on `port` (None if absent)."""
    for line in cli(port, "INFO", section).splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return None


def wait_until(predicate, timeout=600):
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.01)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            out = subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True, text=True, timeout=5)
            if out.stdout.strip() == "PONG":
                return
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.05)
    raise RuntimeError("server did not become ready")


class Server:
    def __init__(self, config, medium):
        self.config = config
        self.dir = os.path.join(medium, f"cmp-redis-{config}")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.port = free_port()
        # Both servers take the same flag; TCP stays on for wait_ready.
        self.socket = os.path.join(self.dir, "server.sock") if UNIX_SOCKET else None
        unix = ["--unixsocket", self.socket] if self.socket else []
        if config.startswith("scaledkv"):
            binary = BASELINE if config == "scaledkv-base" else SERVER
            cmd = [binary, "--port", str(self.port), "--dir", self.dir, "--durability", "sync"] + CONFIGS[config]
            env = dict(os.environ, RUST_LOG="warn")
        else:
            cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir]
            cmd += CONFIGS[config]
            env = os.environ
        cmd += unix
        self.tls_port = None
        if TLS:
            certs = tls_certs()
            self.tls_port = free_port()
            cmd += ["--tls-port", str(self.tls_port), "--tls-cert-file", certs["server.pem"],
                    "--tls-key-file", certs["server.key"], "--tls-ca-cert-file", certs["ca.pem"]]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        wait_ready(self.port, self.proc)

    def cpu_seconds(self):
        return cpu_seconds(self.proc.pid)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def bench(server, test, n, keyspace, pipeline, clients=CLIENTS, value=VALUE):
    return run_benchmark(server, n, ["-t", test, "-r", str(keyspace), "-c", str(clients), "-d", str(value),
                                     "-P", str(pipeline)])


def bench_command(server, words, n, pipeline, clients=CLIENTS, keyspace=None):
    """redis-benchmark sending the command `words` n times (its
    __rand_int__ below `keyspace`)."""
    extra = ["-r", str(keyspace)] if keyspace else []
    return run_benchmark(server, n, extra + ["-c", str(clients), "-P", str(pipeline)] + words)


def run_benchmark(server, n, args):
    """One redis-benchmark run of n requests against `server`: req/s, p50
    and p99 in ms, and the server's CPU µs per request."""
    before = server.cpu_seconds()
    socket_path = getattr(server, "socket", None)
    target = ["-s", socket_path] if socket_path else ["-p", str(server.port)]
    if getattr(server, "tls_port", None):
        certs = tls_certs()
        target = ["-p", str(server.tls_port), "--tls", "--cacert", certs["ca.pem"], "--cert", certs["client.pem"],
                  "--key", certs["client.key"]]
    out = subprocess.run(["redis-benchmark"] + target + ["-n", str(n), "--csv"] + args,
                         capture_output=True, text=True, check=True)
    cpu = server.cpu_seconds() - before
    row = out.stdout.strip().splitlines()[-1].replace('"', "").split(",")
    return {"rps": float(row[1]), "p50": float(row[4]), "p99": float(row[6]), "cpu_us": cpu * 1e6 / n}


class Comparison:
    """A side-by-side comparison of custom commands (compare_geo.py,
    compare_sort.py, compare_streams.py, compare_scripts.py): its settings
    from the environment (REPEATS, N, KEYSPACE, PIPELINES, MEDIA, CONFIGS)
    and its report, bench-results/<name>-<timestamp>.md."""

    def __init__(self, name, n, keyspace=None):
        global REPORT
        self.repeats = int(os.environ.get("REPEATS", "3"))
        self.n = int(os.environ.get("N", str(n)))
        self.keyspace = int(os.environ.get("KEYSPACE", str(keyspace))) if keyspace else None
        self.pipelines = [int(p) for p in os.environ.get("PIPELINES", "1 16").split()]
        self.media = os.environ.get("MEDIA", f"/dev/shm {REPO}/bench-data").split()
        self.configs = os.environ.get("CONFIGS", "redis-none redis-always scaledkv-sync").split()
        REPORT = os.path.join(REPO, "bench-results", f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.md")

    def bench(self, server, words, pipeline):
        return bench_command(server, words, self.n, pipeline, CLIENTS, self.keyspace)

    def run(self, title, names, bench, column="workload", detail=""):
        """Emits the heading, runs `side_by_side` and says where the report is."""
        keyspace = f" -r {self.keyspace}" if self.keyspace else ""
        emit(f"## {title}: scaledkv-server vs Redis ({time.strftime('%Y-%m-%d %H:%M')}, "
             f"{os.cpu_count()} cores, -n {self.n}{keyspace} -c {CLIENTS}{detail})")
        side_by_side(names, bench, self.configs, self.media, self.pipelines, self.repeats, column)
        print(f"\nwritten to {REPORT}")


def median(values):
    return statistics.median(values) if values else float("nan")


def ratio(value, base):
    """`value / base` as a table cell; a dash when the base was not run."""
    return "—" if base != base or not base else f"{value / base:.2f}x"


def side_by_side(names, bench, configs, media, pipelines, repeats, column):
    """Each medium and pipeline depth: `repeats` rounds of each config on a
    fresh data directory, `bench(server, name, pipeline)` (a dict of rps,
    p50, p99, cpu_us) for every name in turn, then a table of medians with
    ratios to redis-none and redis-always. Used by compare_scripts.py and
    compare_streams.py; `column` heads the names' column."""
    for medium in media:
        for pipeline in pipelines:
            steal_from = hoststeal.cpu_times()
            runs = {}
            for rep in range(repeats):
                for config in configs:
                    server = Server(config, medium)
                    try:
                        for name in names:
                            result = bench(server, name, pipeline)
                            runs.setdefault((config, name), []).append(result)
                            print(f"  {medium} -P {pipeline} rep {rep + 1}/{repeats} {config:14} {name}: "
                                  f"{result['rps']:>10,.0f} req/s  p99 {result['p99']:.3f} ms  "
                                  f"cpu {result['cpu_us']:.2f} us/req", flush=True)
                    finally:
                        server.stop()
            emit(f"\n### {medium}, -P {pipeline}, median of {repeats}\n")
            emit(f"Host CPU steal during these runs: {hoststeal.percent_since(steal_from):.1f}%\n")
            emit(f"| {column} | server | req/s | p50 ms | p99 ms | server CPU µs/req | vs redis-none | vs redis-always |")
            emit("|---|---|---:|---:|---:|---:|---:|---:|")
            for name in names:
                base_none = median([r["rps"] for r in runs.get(("redis-none", name), [])])
                base_always = median([r["rps"] for r in runs.get(("redis-always", name), [])])
                for config in configs:
                    rs = runs[(config, name)]
                    rps = median([r["rps"] for r in rs])
                    emit(f"| {name} | {config} | {rps:,.0f} | {median([r['p50'] for r in rs]):.3f} | "
                         f"{median([r['p99'] for r in rs]):.3f} | {median([r['cpu_us'] for r in rs]):.2f} | "
                         f"{ratio(rps, base_none)} | {ratio(rps, base_always)} |")


def main_tables():
    for medium in MEDIA:
        os.makedirs(medium, exist_ok=True)
        for pipeline in PIPELINES:
            runs = {(c, t): [] for c in MAIN for t in ("SET", "GET")}
            steal_from = hoststeal.cpu_times()
            for rep in range(REPEATS):
                for config in MAIN:
                    server = Server(config, medium)
                    try:
                        for test in ("SET", "GET"):
                            result = bench(server, test.lower(), N, N, pipeline)
                            runs[(config, test)].append(result)
                            print(f"  {medium} -P {pipeline} rep {rep + 1}/{REPEATS} {config:15} {test}: "
                                  f"{result['rps']:>10,.0f} req/s  p99 {result['p99']:.3f} ms  "
                                  f"cpu {result['cpu_us']:.2f} us/req", flush=True)
                    finally:
                        server.stop()
            over = ", over Unix sockets" if UNIX_SOCKET else ", over TLS" if TLS else ""
            emit(f"\n### {medium}, -P {pipeline}: -t set,get -n {N} -r {N} -c {CLIENTS} -d {VALUE}{over}, "
                 f"median of {REPEATS}\n")
            emit(f"Host CPU steal during these runs: {hoststeal.percent_since(steal_from):.1f}%\n")
            emit("| server | test | req/s | p50 ms | p99 ms | server CPU µs/req | vs redis-none | vs redis-always |")
            emit("|---|---|---:|---:|---:|---:|---:|---:|")
            for test in ("SET", "GET"):
                base_none = median([r["rps"] for r in runs.get(("redis-none", test), [])])
                base_always = median([r["rps"] for r in runs.get(("redis-always", test), [])])
                for config in MAIN:
                    rs = runs[(config, test)]
                    rps = median([r["rps"] for r in rs])
                    emit(f"| {config} | {test} | {rps:,.0f} | {median([r['p50'] for r in rs]):.3f} | "
                         f"{median([r['p99'] for r in rs]):.3f} | {median([r['cpu_us'] for r in rs]):.2f} | "
                         f"{ratio(rps, base_none)} | {ratio(rps, base_always)} |")
            # Every run, in the order they ran: medians hide the spread that
            # decides whether an A/B means anything.
            emit("\nEach run (req/s, p99 ms):\n")
            for test in ("SET", "GET"):
                for config in MAIN:
                    runs_text = ", ".join(f"{r['rps']:,.0f} / {r['p99']:.2f}" for r in runs[(config, test)])
                    emit(f"- {config} {test}: {runs_text}")


def series_table():
    if not SERIES:
        return
    for medium in MEDIA:
        emit(f"\n### Original experiment on {medium}: redis-benchmark -t set -r 100000 -n N (-c {CLIENTS}, "
             f"-d 3), seconds to finish, median of {REPEATS}\n")
        emit("| N | " + " | ".join(SERIES_CONFIGS) + " | scaledkv vs redis-rdb | scaledkv vs redis-always |")
        # (with CONFIGS/threads as for the main tables' scaledkv-sync)
        emit("|---:|" + "---:|" * (len(SERIES_CONFIGS) + 2))
        for n in SERIES:
            secs = {c: [] for c in SERIES_CONFIGS}
            for _ in range(REPEATS):
                for config in SERIES_CONFIGS:
                    server = Server(config, medium)
                    try:
                        result = bench(server, "set", n, 100000, 1, value=3)
                        secs[config].append(n / result["rps"])
                    finally:
                        server.stop()
            med = {c: median(v) for c, v in secs.items()}
            emit(f"| {n:,} | " + " | ".join(f"{med[c]:.3f}" for c in SERIES_CONFIGS)
                 + f" | {med['redis-rdb'] / med['scaledkv-sync']:.2f}x"
                 + f" | {med['redis-always'] / med['scaledkv-sync']:.2f}x |")


def main():
    for tool in ("redis-server", "redis-benchmark", "redis-cli"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: run scripts/compare-redis.sh, which installs it")
    if not os.path.exists(SERVER):
        sys.exit("build first: cargo build --release -p scaledkv-server")
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.strip()
    emit(f"## scaledkv-server vs {version.split(' sha')[0]} ({time.strftime('%Y-%m-%d %H:%M')}, "
         f"{os.cpu_count()} cores, media: {', '.join(MEDIA)})")
    main_tables()
    series_table()
    print(f"\nwritten to {REPORT}")


if __name__ == "__main__":
    main()
