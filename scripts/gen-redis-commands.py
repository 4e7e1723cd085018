#!/usr/bin/env python3
"""Writes crates/server/src/commands/redis_commands.tsv: every command and
subcommand of a running Redis 7 (Debian's redis-server 7.0.15 when it was
made), with its arity, flags, ACL categories and key specifications, as
that server's COMMAND reports them. ACL rules (+@read, +config|get, ~app:*
with %R/%W) mean what they mean in Redis only against Redis's own command
table, including the commands ScaledKV does not have.

    scripts/gen-redis-commands.py [PORT]   # a redis-server on 127.0.0.1:PORT

Without PORT it starts redis-server on a free port and stops it by PID.
One line per command, sorted by name (Redis's own order is a dict's):
    fullname <TAB> arity <TAB> flags <TAB> categories <TAB> key specs
             <TAB> first,last,step <TAB> tips
flags, categories and tips comma-separated (categories without '@'); key
specs ';'-separated, each FLAGS/BEGIN/FIND[/NOTES] with BEGIN i<pos> |
k<keyword>,<startfrom> | u and FIND r<lastkey>,<step>,<limit> |
n<keynumidx>,<firstkey>,<step> | u, NOTES with '%', '/', ';' and tabs
written as %XX. COMMAND INFO answers from these columns as Redis does.

It also writes crates/server/src/commands/redis_docs.resp: that server's
COMMAND DOCS reply in RESP3 (a map of every command's documentation,
sorted by name), from which COMMAND DOCS answers.
"""
import os
import socket
import subprocess
import sys
import tempfile
import time


def read_reply(f):
    line = f.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind in (b"+", b"-"):
        return rest.decode()
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data.decode()
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read_reply(f) for _ in range(n)]
    raise ValueError(f"unexpected reply {line!r}")


def raw_reply(f):
    """One RESP3 reply's bytes, as sent."""
    line = f.readline()
    kind, rest = line[:1], line[1:].strip()
    out = [line]
    if kind in (b"$", b"=", b"!"):
        n = int(rest)
        if n >= 0:
            out.append(f.read(n + 2))
    elif kind in (b"*", b"~", b">"):
        out.extend(raw_reply(f) for _ in range(max(int(rest), 0)))
    elif kind == b"%":
        out.extend(raw_reply(f) for _ in range(2 * int(rest)))
    return b"".join(out)


def pairs(flat):
    return dict(zip(flat[0::2], flat[1::2]))


def spec_text(spec):
    spec = pairs(spec)
    flags = ",".join(spec["flags"])
    begin = pairs(spec["begin_search"])
    find = pairs(spec["find_keys"])
    if begin["type"] == "index":
        b = f"i{pairs(begin['spec'])['index']}"
    elif begin["type"] == "keyword":
        k = pairs(begin["spec"])
        b = f"k{k['keyword']},{k['startfrom']}"
    else:
        b = "u"
    if find["type"] == "range":
        r = pairs(find["spec"])
        fk = f"r{r['lastkey']},{r['keystep']},{r['limit']}"
    elif find["type"] == "keynum":
        n = pairs(find["spec"])
        fk = f"n{n['keynumidx']},{n['firstkey']},{n['keystep']}"
    else:
        fk = "u"
    notes = spec.get("notes")
    if notes is None:
        return f"{flags}/{b}/{fk}"
    for ch in "%/;\t\n":
        notes = notes.replace(ch, f"%{ord(ch):02X}")
    return f"{flags}/{b}/{fk}/{notes}"


def lines(command):
    name, arity, flags, first, last, step, categories, tips, specs, subcommands = command
    row = "\t".join(
        [
            name,
            str(arity),
            ",".join(flags),
            ",".join(c.lstrip("@") for c in categories),
            ";".join(spec_text(s) for s in specs),
            f"{first},{last},{step}",
            ",".join(tips),
        ]
    )
    yield row
    for sub in sorted(subcommands, key=lambda c: c[0]):
        yield from lines(sub)


def main():
    server = None
    if len(sys.argv) > 1:
        port = int(sys.argv[1])
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        workdir = tempfile.mkdtemp()
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir],
            stdout=subprocess.DEVNULL,
        )
        time.sleep(0.3)
    try:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            f = sock.makefile("rb")
            sock.sendall(b"INFO server\r\n")
            version = [l for l in read_reply(f).splitlines() if l.startswith("redis_version:")][0]
            sock.sendall(b"COMMAND\r\n")
            commands = read_reply(f)
            sock.sendall(b"HELLO 3\r\n")
            raw_reply(f)
            sock.sendall(b"COMMAND DOCS\r\n")
            header = f.readline()
            assert header.startswith(b"%"), header
            docs = [(raw_reply(f), raw_reply(f)) for _ in range(int(header[1:]))]
            docs.sort(key=lambda entry: entry[0].split(b"\r\n")[1])
    finally:
        if server:
            server.kill()
            server.wait()
    out = os.path.join(os.path.dirname(__file__), "..", "crates/server/src/commands/redis_commands.tsv")
    rows = [row for command in sorted(commands, key=lambda c: c[0]) for row in lines(command)]
    with open(out, "w") as f:
        f.write(f"# {version}: written by scripts/gen-redis-commands.py from its COMMAND reply\n")
        f.write("\n".join(rows) + "\n")
    with open(os.path.join(os.path.dirname(out), "redis_docs.resp"), "wb") as f:
        f.write(b"%%%d\r\n" % len(docs) + b"".join(name + text for name, text in docs))
    print(f"{len(rows)} commands and subcommands, {len(docs)} commands' docs from {version}")


if __name__ == "__main__":
    main()
