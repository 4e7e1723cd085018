#!/usr/bin/env python3
"""Writes crates/server/src/redis_configs.tsv: every configuration
parameter of a Redis 7 (Debian's redis-server 7.0.15 when it was made),
with its default, its type and the values it takes, as that server's own
answers show them. CONFIG GET, CONFIG SET and a redis.conf read with it
then name, check and refuse Redis's parameters as Redis does.

    scripts/gen-redis-configs.py

It starts redis-server on a free port (and stops it by PID), and learns
each parameter's type from the error CONFIG SET gives for a value no type
takes: "argument must be 'yes' or 'no'" (bool), "one of the following:
..." (enum, with its choices), "couldn't be parsed into an integer" (int),
"must be a memory value" (memory); a value it takes makes a text. The
range of an int or a memory value comes from the error for the largest
and smallest 64-bit numbers. A parameter CONFIG SET cannot change
(immutable) is probed the same way through redis-server's command line
(`--port 0`: a server given a valid value exits at once, listening
nowhere). Aliases (slave-priority for replica-priority) are the
parameters whose value moves with another's.

One line per parameter, sorted by name:
    name <TAB> kind <TAB> default <TAB> detail <TAB> flags
kind: bool, int, memory, enum, text or special (a syntax of its own:
save, bind, client-output-buffer-limit ...); detail: "low,high" for int
and memory, the choices for enum (comma-separated); flags
(comma-separated): immutable, protected (CONFIG SET refuses it unless
enable-protected-configs), percent (a memory value may be a percentage),
multi (an enum taking several choices), alias=NAME.
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "server", "src", "redis_configs.tsv")
BAD = "!x!"
MAX = "9223372036854775807"
MIN = "-9223372036854775808"
UMAX = "18446744073709551615"
# Settings the probe must not change on the server it talks to.
UNTOUCHED = {"requirepass", "masterauth", "masteruser", "port", "bind", "dir", "save", "appendonly", "replicaof",
             "slaveof", "unixsocket", "tls-port", "cluster-enabled", "daemonize", "loglevel", "logfile", "pidfile"}
# Paths, passwords and settings of a syntax of their own, not probed.
TEXTS = {"dir", "logfile", "pidfile", "unixsocket", "requirepass", "masterauth", "masteruser"}
SPECIAL = {"replicaof", "slaveof", "save", "bind"}
# Of UNTOUCHED, what CONFIG SET changes in Redis.
MUTABLE = {"requirepass", "masterauth", "masteruser", "port", "bind", "dir", "save", "appendonly", "loglevel",
           "tls-port"}
# What a server started by this script sets, and their defaults otherwise.
STARTED_WITH = {"port": "6379", "bind": "* -::*", "save": "3600 1 300 100 60 10000", "dir": "", "appendonly": "no"}


def read_reply(f):
    line = f.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2].decode()
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read_reply(f) for _ in range(n)]
    raise ValueError(f"unexpected reply {line!r}")


class Client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.f = self.sock.makefile("rb")

    def call(self, *args):
        out = [f"*{len(args)}\r\n".encode()]
        for a in args:
            a = a.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return read_reply(self.f)

    def all(self):
        flat = self.call("CONFIG", "GET", "*")
        return dict(zip(flat[0::2], flat[1::2]))


def error_text(reply):
    if not isinstance(reply, RuntimeError):
        return None
    text = str(reply)
    marker = " - "
    return text.split(marker, 1)[1] if marker in text else text


def startup_error(name, value):
    """redis-server's error for `--name value` (None: it took it)."""
    try:
        run = subprocess.run(["redis-server", "--port", "0", "--save", "", f"--{name}", value],
                             capture_output=True, text=True, timeout=5, cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        return None
    lines = (run.stdout + run.stderr).strip().splitlines()
    if "FATAL CONFIG FILE ERROR" not in run.stdout + run.stderr:
        return None
    return lines[-1].strip()


def bounds(set_error, probes, low, high):
    """"low,high" from the range errors for `probes` (the widest values)."""
    for probe in probes:
        text = set_error(probe) or ""
        if text.startswith("argument must be between "):
            low, high = text[len("argument must be between "):-len(" inclusive")].split(" and ")
    return f"{low},{high}"


def classify(name, default, set_error):
    """kind, detail, flags from the errors for values no type takes."""
    flags = []
    bad = set_error(BAD)
    if bad is None:
        return "text", "", flags
    if bad == "argument must be 'yes' or 'no'":
        return "bool", "", flags
    if bad.startswith("argument(s) must be one of the following: "):
        choices = bad.split(": ", 1)[1].split(", ")
        if len(choices) > 1 and set_error(f"{choices[0]} {choices[1]}") is None:
            flags.append("multi")
        return "enum", ",".join(choices), flags
    if bad == "argument couldn't be parsed into an integer":
        return "int", bounds(set_error, (MAX, MIN), MIN, MAX), flags
    if bad in ("argument must be a memory value", "argument must be a memory or percent value"):
        if "percent" in bad:
            flags.append("percent")
        return "memory", bounds(set_error, (UMAX, "0"), "0", UMAX), flags
    return "special", "", flags


def main():
    with tempfile.TemporaryDirectory() as tmp:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(200):
                try:
                    client = Client(port)
                    client.call("PING")
                    break
                except OSError:
                    time.sleep(0.05)
            rows = probe(client)
        finally:
            server.kill()
            server.wait()
    with open(OUT, "w") as out:
        for row in rows:
            out.write("\t".join(row) + "\n")
    print(f"{len(rows)} parameters -> {os.path.relpath(OUT)}")


def probe(client):
    defaults = client.all()
    defaults.update(STARTED_WITH)
    rows = []
    for name in sorted(defaults):
        default = defaults[name]
        first = error_text(client.call("CONFIG", "SET", name, BAD)) if name not in UNTOUCHED else None
        immutable = name in UNTOUCHED - MUTABLE or first in ("can't set immutable config", "can't set protected config")
        flags = []
        if first == "can't set protected config":
            flags.append("protected")
        if name in TEXTS or name in SPECIAL:
            kind, detail = ("text" if name in TEXTS else "special"), ""
            flags = ["immutable"] * immutable + flags
        elif immutable or name in UNTOUCHED:
            kind, detail, more = classify(name, default, lambda v: startup_error(name, v))
            flags = ["immutable"] * immutable + flags + more
        else:
            def set_error(value):
                reply = client.call("CONFIG", "SET", name, value)
                client.call("CONFIG", "SET", name, default)
                return error_text(reply)
            kind, detail, more = classify(name, default, set_error)
            flags += more
            alias = alias_of(client, name, kind, detail, default, defaults)
            if alias:
                flags.append(f"alias={alias}")
        rows.append([name, kind, default, detail, ",".join(flags)])
    return rows


def alias_of(client, name, kind, detail, default, defaults):
    """The other parameter whose value moves with `name`'s, if any."""
    if kind == "bool":
        other = "no" if default == "yes" else "yes"
    elif kind == "int" or kind == "memory":
        low, high = (int(v) for v in detail.split(","))
        other = str(int(default) + 1 if int(default) < high else int(default) - 1)
    elif kind == "enum":
        other = next(c for c in detail.split(",") if c != default)
    elif kind == "text":
        other = "probe"
    else:
        return None
    if error_text(client.call("CONFIG", "SET", name, other)) is not None:
        return None
    now = client.all()
    client.call("CONFIG", "SET", name, default)
    moved = [n for n in now if n != name and n in defaults and now[n] != defaults[n] and n not in STARTED_WITH]
    # The older name (slave-*, *-ziplist-*, lua-time-limit) names the newer.
    older = "slave" in name or "ziplist" in name or name == "lua-time-limit"
    return moved[0] if moved and older else None


if __name__ == "__main__":
    sys.exit(main())
