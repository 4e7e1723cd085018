#!/usr/bin/env python3
"""Redis Sentinel failing over ScaledKV against failing over Redis.

For each configuration (ScaledKV `sync`, Redis without persistence, Redis
`appendfsync always`): a master and two replicas, each on a fresh data
directory on MEDIUM; N SETs of VALUE bytes loaded (WAIT 2); three
sentinels (`redis-server --sentinel`, down-after-milliseconds 1000) watch
them. Then the master is SIGKILLed and this measures, from the kill:
  failover   until a sentinel names a replica and it takes a SET
  repoint    until the other replica's link to the new master is up
             (and whether it resynced in full or went on: sync_full /
             sync_partial_ok on the new master)
  rejoin     the old master restarted on its data directory: from its
             start until the sentinels made it a replica of the new master
             with its link up
and checks that every loaded key is on the new master. REPEATS rounds,
interleaved; medians. A round that does not finish (the sentinels failed
over again, say) prints the sentinels' logs and is counted, not timed.

Every process started here is stopped by its PID. Results are printed and
appended to bench-results/failover-<timestamp>.md.
"""

import os
import shutil
import signal
import subprocess
import time

import compare_redis
from compare_redis import CONFIGS, SERVER, cli, emit, free_port, info, median, wait_ready

REPEATS = int(os.environ.get("REPEATS", "3"))
N = int(os.environ.get("N", "100000"))
VALUE = int(os.environ.get("VALUE", "1024"))
MEDIUM = os.environ.get("MEDIUM", "/dev/shm")
RUN = os.environ.get("CONFIGS", "scaledkv-sync redis-none redis-always").split()
NAME = "failover"
compare_redis.REPORT = os.path.join(compare_redis.REPO, "bench-results",
                                    f"failover-{time.strftime('%Y%m%d-%H%M%S')}.md")


class Node:
    """A server on a fixed port and data directory, restartable there."""

    def __init__(self, config, name):
        self.dir = os.path.join(MEDIUM, f"cmp-failover-{name}")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.port = free_port()
        if config.startswith("scaledkv"):
            self.cmd = [SERVER, "--port", str(self.port), "--dir", self.dir, "--durability", "sync"]
            self.env = dict(os.environ, RUST_LOG="warn")
        else:
            self.cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir]
            self.cmd += CONFIGS[config]
            self.env = os.environ
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env)
        wait_ready(self.port, self.proc)

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Sentinel:
    def __init__(self, index, master_port):
        self.dir = os.path.join("/tmp", f"cmp-failover-sentinel-{index}")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.port = free_port()
        conf = os.path.join(self.dir, "sentinel.conf")
        self.log = os.path.join(self.dir, "sentinel.log")
        with open(conf, "w") as f:
            f.write(f"port {self.port}\nbind 127.0.0.1\ndaemonize no\nlogfile {self.log}\n"
                    f"sentinel monitor {NAME} 127.0.0.1 {master_port} 2\n"
                    f"sentinel down-after-milliseconds {NAME} 1000\n"
                    f"sentinel failover-timeout {NAME} 10000\n"
                    f"sentinel parallel-syncs {NAME} 1\n")
        self.proc = subprocess.Popen(["redis-server", conf, "--sentinel"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_ready(self.port, self.proc)

    def master(self):
        words = cli(self.port, "SENTINEL", "MASTER", NAME).splitlines()
        return dict(zip(words[::2], words[1::2]))

    def master_port(self):
        words = cli(self.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", NAME).splitlines()
        return int(words[1]) if len(words) == 2 else None

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def wait_for(predicate, timeout=120):
    """Seconds until `predicate` holds."""
    started = time.time()
    while not predicate():
        if time.time() - started > timeout:
            raise RuntimeError("timed out")
        time.sleep(0.01)
    return time.time() - started


def follows(port, master):
    try:
        return info(port, "master_port") == str(master) and info(port, "master_link_status") == "up"
    except subprocess.SubprocessError:
        return False


def takes_writes(port):
    try:
        return cli(port, "SET", "after-failover", "1") == "OK"
    except subprocess.SubprocessError:
        return False


def found(master):
    """Whether a sentinel's SENTINEL MASTER fields show both replicas
    and the two other sentinels."""
    return master.get("num-slaves") == "2" and master.get("num-other-sentinels") == "2"


def one_round(config):
    nodes, sentinels = [], []
    try:
        nodes = [Node(config, name) for name in ("a", "b", "c")]
        master = nodes[0]
        for replica in nodes[1:]:
            cli(replica.port, "REPLICAOF", "127.0.0.1", master.port)
        subprocess.run(["redis-benchmark", "-p", str(master.port), "-t", "set", "-n", str(N), "-r", str(N),
                        "-d", str(VALUE), "-c", "50", "-P", "16", "-q"], capture_output=True, check=True)
        wait_for(lambda: all(follows(r.port, master.port) for r in nodes[1:]))
        assert cli(master.port, "WAIT", 2, 60000) == "2"
        keys = int(cli(master.port, "DBSIZE"))
        sentinels = [Sentinel(i, master.port) for i in range(3)]
        wait_for(lambda: all(found(s.master()) for s in sentinels))
        killed = time.time()
        master.kill()
        wait_for(lambda: sentinels[0].master_port() not in (None, master.port)
                 and takes_writes(sentinels[0].master_port()))
        failover = time.time() - killed
        new = next(n for n in nodes if n.port == sentinels[0].master_port())
        other = next(n for n in nodes[1:] if n is not new)
        wait_for(lambda: follows(other.port, new.port))
        repoint = time.time() - killed
        full, partial = (int(info(new.port, f, "stats")) for f in ("sync_full", "sync_partial_ok"))
        lost = keys + 1 - int(cli(new.port, "DBSIZE"))
        restarted = time.time()
        master.start()
        wait_for(lambda: follows(master.port, new.port))
        rejoin = time.time() - restarted
        return {"failover": failover, "repoint": repoint, "rejoin": rejoin, "full": full, "partial": partial,
                "lost": lost}
    except (RuntimeError, subprocess.SubprocessError, AssertionError, StopIteration) as error:
        for sentinel in sentinels:
            with open(sentinel.log) as f:
                print(f"sentinel {sentinel.port}'s log:\n" + "".join(f.readlines()), flush=True)
        return {"error": repr(error)}
    finally:
        for process in sentinels + nodes:
            process.stop()


def interleaved(one_round, configs, repeats):
    """`repeats` rounds of each configuration, interleaved, each printed:
    {config: [round's result, ...]}; a result with "error" did not finish."""
    results = {config: [] for config in configs}
    for _ in range(repeats):
        for config in configs:
            results[config].append(one_round(config))
            print(config, results[config][-1], flush=True)
    return results


def emit_rows(results, cells):
    """A table row per configuration: `cells(rounds)` of the rounds that
    finished gives the three timing columns and the one after the new
    master's syncs (full / partial, between them); the last column is how
    many rounds did not finish."""
    for config, all_rounds in results.items():
        rounds = [r for r in all_rounds if "error" not in r]
        unfinished = len(all_rounds) - len(rounds)
        if not rounds:
            emit(f"| {config} | | | | | | {unfinished} |")
            continue
        syncs = ", ".join(f"{r['full']}/{r['partial']}" for r in rounds)
        first, rest = cells(rounds)
        emit(f"| {config} | {' | '.join(first)} | {syncs} | {rest} | {unfinished} |")


def main():
    emit(f"\n## Sentinel failover: {N} keys of {VALUE} B on {MEDIUM}, {REPEATS} rounds, medians "
         f"(down-after-milliseconds 1000)\n")
    results = interleaved(one_round, RUN, REPEATS)
    emit("| servers | failover s | other replica linked s | old master rejoined s | new master's syncs "
         "(full / partial) | loaded keys missing | rounds unfinished |")
    emit("|---|---:|---:|---:|---|---:|---:|")
    emit_rows(results, lambda rounds: (
        [f"{median([r[key] for r in rounds]):.2f}" for key in ("failover", "repoint", "rejoin")],
        max(r["lost"] for r in rounds)))


if __name__ == "__main__":
    main()
