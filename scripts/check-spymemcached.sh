#!/usr/bin/env bash
# spymemcached, the Java memcached client, unchanged against
# scaledkv-server's memcached port: scripts/spymemcached/MemcachedCheck.java
# makes a client's calls (stores, CAS, counters, appends, touch, bulk gets,
# stats) over the binary and the text protocol, then over the binary one
# with SASL PLAIN against a server with --requirepass, and exits 1 on the
# first wrong answer. Run against memcached too when it is installed, so a
# wrong check shows as well.
#
# Installs Debian's maven and a JDK if missing; Maven only resolves
# spymemcached (scripts/spymemcached/pom.xml). If Maven Central cannot be
# reached it prints a NOTICE and skips (scripts/java-check-setup.sh).
# Every server started here is stopped by its PID.
set -euo pipefail
cd "$(dirname "$0")/.."
client=spymemcached project=scripts/spymemcached main=scripts/spymemcached/MemcachedCheck.java
# shellcheck source=scripts/java-check-setup.sh
. scripts/java-check-setup.sh

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits for a memcached server to answer `version` on port $1.
wait_for() {
    for _ in $(seq 200); do
        if { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null; then
            printf 'version\r\n' >&3
            if read -r -t 1 reply <&3 && [ "${reply%% *}" = "VERSION" ]; then exec 3>&-; return 0; fi
            exec 3>&-
        fi
        sleep 0.05
    done
    echo "server on port $1 did not answer" >&2
    return 1
}

# The client logs each connection at INFO on stderr; its verdict is on stdout.
check() { java -cp "$out/classes:$cp" MemcachedCheck "$@" 2>"$out/client.log" || { cat "$out/client.log" >&2; exit 1; }; }

data="$(mktemp -d)"
port=$(free_port)
target/release/scaledkv-server --port 0 --memcached-port "$port" --dir "$data/server" >"$out/server.log" 2>&1 &
pids+=($!)
wait_for "$port"
echo "== scaledkv-server, memcached port $port"
check "$port" binary
check "$port" text

# A text connection may not authenticate by SASL: the ASCII check is the
# server tests' (tests/memcached.rs).
secure=$(free_port)
target/release/scaledkv-server --port 0 --memcached-port "$secure" --dir "$data/secure" --requirepass sesame >"$out/secure.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do { exec 3<>"/dev/tcp/127.0.0.1/$secure"; } 2>/dev/null && { exec 3>&-; break; }; sleep 0.05; done
echo "== scaledkv-server with --requirepass, memcached port $secure"
check "$secure" binary sesame

if command -v memcached >/dev/null; then
    mc_port=$(free_port)
    user=()
    [ "$(id -u)" = 0 ] && user=(-u root)
    memcached -l 127.0.0.1 -p "$mc_port" -U 0 "${user[@]}" >/dev/null 2>&1 &
    pids+=($!)
    wait_for "$mc_port"
    echo "== memcached on port $mc_port (the check itself)"
    check "$mc_port" binary
    check "$mc_port" text
else
    echo "NOTICE: memcached not found; the check ran against ScaledKV only"
fi
rm -rf "$data"
