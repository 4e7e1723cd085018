#!/usr/bin/env python3
"""Pub/sub fan-out, scaledkv-server vs redis-server, side by side.

For S subscribers of one channel (SUBSCRIBERS, default 0 1 10 50), one
process holds the S subscriber connections and counts the bytes each
receives, while `redis-benchmark -c 50 -P PIPELINE -n N PUBLISH ch <64 B>`
publishes. Reported per server, median of REPEATS interleaved runs:
PUBLISH req/s, messages delivered per second (S x N over the time from
the benchmark's start to the last subscriber's last byte), and the
server's CPU time per delivered message (per PUBLISH without
subscribers). Pub/sub keeps nothing on any medium, so ScaledKV runs in
`sync` mode on /dev/shm and Redis without persistence.

Every process started here is stopped by its PID. Results are printed and
appended to bench-results/pubsub-<timestamp>.md.
"""

import os
import subprocess
import sys
import time

import compare_redis
from compare_redis import REPO, Server, median

REPEATS = int(os.environ.get("REPEATS", "3"))
N = int(os.environ.get("N", "200000"))
PIPELINE = int(os.environ.get("PIPELINE", "16"))
SUBSCRIBERS = [int(s) for s in os.environ.get("SUBSCRIBERS", "0 1 10 50").split()]
PAYLOAD = "x" * 64
CONFIGS = ["redis-none", "scaledkv-sync"]
MEDIUM = "/dev/shm"
REPORT = os.path.join(REPO, "bench-results", f"pubsub-{time.strftime('%Y%m%d-%H%M%S')}.md")
# compare_redis's `emit`, writing this script's report.
compare_redis.REPORT = REPORT
emit = compare_redis.emit

# One process, S connections: subscribes, says "ready", then counts bytes
# until every connection has its N messages (or 120 s pass) and prints the
# time of the last byte and how many connections got everything.
SUBSCRIBER = r"""
import selectors, socket, sys, time
port, count, n, size = (int(a) for a in sys.argv[1:5])
conns = []
for _ in range(count):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$2\r\nch\r\n")
    want = b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
    got = b""
    while len(got) < len(want):
        got += s.recv(len(want) - len(got))
    s.setblocking(False)
    conns.append(s)
print("ready", flush=True)
sel = selectors.DefaultSelector()
left = {}
for s in conns:
    sel.register(s, selectors.EVENT_READ)
    left[s] = n * size
last = time.time()
deadline = last + 120
while left and time.time() < deadline:
    for key, _ in sel.select(timeout=1):
        data = key.fileobj.recv(1 << 20)
        if not data:
            sel.unregister(key.fileobj)
            del left[key.fileobj]
            continue
        last = time.time()
        left[key.fileobj] -= len(data)
        if left[key.fileobj] <= 0:
            sel.unregister(key.fileobj)
            del left[key.fileobj]
print(f"{last} {count - len(left)}", flush=True)
"""


def message_bytes():
    return len(f"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n${len(PAYLOAD)}\r\n{PAYLOAD}\r\n")


def run(server, subscribers):
    listener = None
    if subscribers:
        listener = subprocess.Popen(
            [sys.executable, "-c", SUBSCRIBER, str(server.port), str(subscribers), str(N), str(message_bytes())],
            stdout=subprocess.PIPE, text=True)
        assert listener.stdout.readline().strip() == "ready"
    try:
        before = server.cpu_seconds()
        start = time.time()
        out = subprocess.run(
            ["redis-benchmark", "-p", str(server.port), "-c", "50", "-P", str(PIPELINE), "-n", str(N), "--csv",
             "PUBLISH", "ch", PAYLOAD], capture_output=True, text=True, check=True)
        rps = float(out.stdout.strip().splitlines()[-1].replace('"', "").split(",")[1])
        delivered, whole = 0.0, 0
        if listener:
            last, whole = listener.stdout.readline().split()
            whole = int(whole)
            delivered = subscribers * N / (float(last) - start)
        cpu = server.cpu_seconds() - before
    finally:
        if listener and listener.poll() is None:
            listener.kill()
            listener.wait()
    per = cpu * 1e6 / (subscribers * N if subscribers else N)
    return {"rps": rps, "delivered": delivered, "cpu_us": per, "whole": whole}


def main():
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.strip()
    emit(f"## Pub/sub fan-out: scaledkv-server vs {version.split(' sha')[0]} ({time.strftime('%Y-%m-%d %H:%M')}, "
         f"{os.cpu_count()} cores; redis-benchmark -c 50 -P {PIPELINE} -n {N} PUBLISH ch <{len(PAYLOAD)} B>, "
         f"median of {REPEATS})\n")
    emit("| subscribers | server | PUBLISH/s | delivered msg/s | server CPU µs per message | subscribers served whole "
         "| PUBLISH/s vs Redis | delivered vs Redis |")
    emit("|---:|---|---:|---:|---:|---:|---:|---:|")
    for subscribers in SUBSCRIBERS:
        runs = {config: [] for config in CONFIGS}
        for rep in range(REPEATS):
            for config in CONFIGS:
                server = Server(config, MEDIUM)
                try:
                    result = run(server, subscribers)
                finally:
                    server.stop()
                runs[config].append(result)
                print(f"  {subscribers} subscribers rep {rep + 1} {config}: {result}", flush=True)
        base = {k: median([r[k] for r in runs["redis-none"]]) for k in ("rps", "delivered")}
        for config in CONFIGS:
            rs = runs[config]
            rps, delivered = median([r["rps"] for r in rs]), median([r["delivered"] for r in rs])
            vs_rps = f"{rps / base['rps']:.2f}x"
            vs_delivered = f"{delivered / base['delivered']:.2f}x" if subscribers else "—"
            emit(f"| {subscribers} | {config} | {rps:,.0f} | {delivered:,.0f} | "
                 f"{median([r['cpu_us'] for r in rs]):.2f} | {min(r['whole'] for r in rs)}/{subscribers} | "
                 f"{vs_rps} | {vs_delivered} |")
    print(f"\nwritten to {REPORT}")


if __name__ == "__main__":
    main()
