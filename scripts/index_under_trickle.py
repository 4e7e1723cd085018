#!/usr/bin/env python3
"""Index memory under a steady trickle of writes.

Usage: scripts/index_under_trickle.py SERVER_BINARY PORT (needs redis-benchmark)

Loads ~1M random keys into a fresh server on /dev/shm with redis-benchmark
while a paced writer (WRITES_PER_S, default 1000) keeps writing throughout,
then samples the server's anonymous memory (RssAnon) and INFO's index
estimate every 2 s for 20 s. The server is stopped by its PID."""
import os, socket, subprocess, sys, time, threading, shutil

binary, port = sys.argv[1], int(sys.argv[2])
rate = int(os.environ.get("WRITES_PER_S", "1000"))
data = f"/dev/shm/light-{port}"
shutil.rmtree(data, ignore_errors=True)
srv = subprocess.Popen([binary, "--port", str(port), "--dir", data, "--durability", "sync"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port)).close(); break
        except OSError:
            time.sleep(0.1)
    stop = False
    def writer():
        s = socket.create_connection(("127.0.0.1", port)); f = s.makefile("rb")
        i = 0; t0 = time.time()
        while not stop:
            s.sendall(b"SET light:%d 0123456789\r\n" % i); f.readline(); i += 1
            wait = t0 + i / rate - time.time()
            if wait > 0: time.sleep(wait)
    t = threading.Thread(target=writer); t.start()
    subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set", "-n", "1000000", "-r", "100000000",
                    "-d", "100", "-P", "16", "-c", "50", "-q"], stdout=subprocess.DEVNULL)
    q = socket.create_connection(("127.0.0.1", port)); qf = q.makefile("rb")
    def info():
        q.sendall(b"INFO memory\r\n"); n = int(qf.readline()[1:]); body = qf.read(n + 2).decode()
        return dict(l.split(":", 1) for l in body.split("\r\n") if ":" in l)
    def anon():
        for l in open(f"/proc/{srv.pid}/status"):
            if l.startswith("RssAnon"): return int(l.split()[1]) // 1024
    for sec in range(0, 21, 2):
        i = info()
        print(f"t+{sec:2d}s RssAnon {anon()} MB index_bytes_per_key {i.get('index_bytes_per_key')}", flush=True)
        time.sleep(2)
    stop = True; t.join()
finally:
    srv.terminate(); srv.wait()
    shutil.rmtree(data, ignore_errors=True)
