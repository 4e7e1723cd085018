#!/usr/bin/env python3
"""The FAILOVER command on ScaledKV against Redis's.

For each configuration (ScaledKV `sync`, Redis without persistence, Redis
`appendfsync always`): a master and two replicas, each on a fresh data
directory on MEDIUM; N SETs of VALUE bytes loaded (WAIT 2). A client then
writes keys of its own one by one (recording each acknowledged one) while
`FAILOVER TO <first replica>` runs, and this measures:
  handover   from FAILOVER until the old master's failover state is back
             to no-failover (it follows the new master)
  writable   from FAILOVER until the new master takes a SET
  repoint    the other replica told REPLICAOF the new master: until its
             link is up
and the new master's syncs (full / partial: the old master and the other
replica going on from their offsets or not), and checks that every
acknowledged write is on the new master. REPEATS rounds, interleaved;
medians.

Every process started here is stopped by its PID. Results are printed and
appended to bench-results/failover-command-<timestamp>.md.
"""

import os
import socket
import subprocess
import threading
import time

import compare_failover
import compare_redis
from compare_failover import Node, emit_rows, follows, interleaved, takes_writes, wait_for
from compare_redis import cli, emit, info, median

REPEATS = int(os.environ.get("REPEATS", "3"))
N = compare_failover.N
VALUE = compare_failover.VALUE
MEDIUM = compare_failover.MEDIUM
RUN = os.environ.get("CONFIGS", "scaledkv-sync redis-none redis-always").split()
compare_redis.REPORT = os.path.join(compare_redis.REPO, "bench-results",
                                    f"failover-command-{time.strftime('%Y%m%d-%H%M%S')}.md")


class Writer(threading.Thread):
    """SETs w-0, w-1 ... one at a time until told to stop or refused
    (READONLY); `acked` holds the keys whose SET was answered +OK."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.acked, self.stop, self.error = port, [], False, None

    def run(self):
        with socket.create_connection(("127.0.0.1", self.port)) as sock:
            reader = sock.makefile("rb")
            i = 0
            while not self.stop:
                key = f"w-{i}"
                sock.sendall(compare_redis.resp_command("SET", key, "x" * 100))
                line = reader.readline()
                if line == b"+OK\r\n":
                    self.acked.append(key)
                elif line.startswith(b"-READONLY"):
                    return
                else:
                    self.error = line
                    return
                i += 1


def one_round(config):
    nodes = []
    try:
        nodes = [Node(config, name) for name in ("a", "b", "c")]
        master, heir, other = nodes
        for replica in (heir, other):
            cli(replica.port, "REPLICAOF", "127.0.0.1", master.port)
        subprocess.run(["redis-benchmark", "-p", str(master.port), "-t", "set", "-n", str(N), "-r", str(N),
                        "-d", str(VALUE), "-c", "50", "-P", "16", "-q"], capture_output=True, check=True)
        wait_for(lambda: all(follows(r.port, master.port) for r in (heir, other)))
        assert cli(master.port, "WAIT", 2, 60000) == "2"
        writer = Writer(master.port)
        writer.start()
        time.sleep(0.5)
        started = time.time()
        assert cli(master.port, "FAILOVER", "TO", "127.0.0.1", heir.port) == "OK"
        wait_for(lambda: info(master.port, "master_failover_state") == "no-failover", timeout=30)
        handover = time.time() - started
        wait_for(lambda: takes_writes(heir.port))
        writable = time.time() - started
        writer.stop = True
        writer.join()
        if writer.error:
            raise RuntimeError(f"a write failed: {writer.error!r}")
        wait_for(lambda: follows(master.port, heir.port))
        linked = time.time()
        cli(other.port, "REPLICAOF", "127.0.0.1", heir.port)
        wait_for(lambda: follows(other.port, heir.port))
        repoint = time.time() - linked
        full, partial = (int(info(heir.port, f, "stats")) for f in ("sync_full", "sync_partial_ok"))
        chunks = [writer.acked[at:at + 1000] for at in range(0, len(writer.acked), 1000)]
        missing = len(writer.acked) - sum(int(cli(heir.port, "EXISTS", *chunk)) for chunk in chunks)
        return {"handover": handover, "writable": writable, "repoint": repoint, "full": full, "partial": partial,
                "writes": len(writer.acked), "missing": missing}
    except (RuntimeError, subprocess.SubprocessError, AssertionError) as error:
        return {"error": repr(error)}
    finally:
        for node in nodes:
            node.stop()


def main():
    emit(f"\n## FAILOVER TO a replica under writes: {N} keys of {VALUE} B on {MEDIUM}, {REPEATS} rounds, "
         f"medians\n")
    results = interleaved(one_round, RUN, REPEATS)
    emit("| servers | handover ms | new master writable ms | other replica linked ms | new master's syncs "
         "(full / partial) | acknowledged writes (missing) | rounds unfinished |")
    emit("|---|---:|---:|---:|---|---:|---:|")
    emit_rows(results, lambda rounds: (
        [f"{1000 * median([r[key] for r in rounds]):.0f}" for key in ("handover", "writable", "repoint")],
        f"{median([r['writes'] for r in rounds]):.0f} ({max(r['missing'] for r in rounds)})"))


if __name__ == "__main__":
    main()
