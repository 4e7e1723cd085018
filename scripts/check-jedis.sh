#!/usr/bin/env bash
# Jedis, the Java client (and the library YCSB's Redis binding is built
# on), unchanged against scaledkv-server: scripts/jedis/JedisCheck.java
# makes YCSB's calls, pipelines, a transaction, SCAN, a pool, over RESP2
# and RESP3, and exits 1 on the first wrong answer. Run against Redis too
# when redis-server is installed, so a wrong check shows as well.
#
# Installs Debian's maven and a JDK if missing; Maven only resolves Jedis
# (scripts/jedis/pom.xml). If Maven Central cannot be reached it prints a
# NOTICE and skips (scripts/java-check-setup.sh). Every server started here
# is stopped by its PID.
set -euo pipefail
cd "$(dirname "$0")/.."
client=Jedis project=scripts/jedis main=scripts/jedis/JedisCheck.java
# shellcheck source=scripts/java-check-setup.sh
. scripts/java-check-setup.sh

# Waits for a RESP server to answer PING on port $1.
wait_for() {
    for _ in $(seq 200); do
        if { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null; then
            printf 'PING\r\n' >&3
            if read -r -t 1 reply <&3 && [ "${reply%$'\r'}" = "+PONG" ]; then exec 3>&-; return 0; fi
            exec 3>&-
        fi
        sleep 0.05
    done
    echo "server on port $1 did not answer" >&2
    return 1
}

data="$(mktemp -d)"
target/release/scaledkv-server --port 0 --port-file "$data/port" --dir "$data/server" >"$out/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do [ -s "$data/port" ] && break; sleep 0.05; done
port="$(cat "$data/port")"
wait_for "$port"
echo "== scaledkv-server on port $port"
# (stderr stays: a failed check says FAILED there; SLF4J's notice that it has no logger too.)
java -cp "$out/classes:$cp" JedisCheck "$port"

if command -v redis-server >/dev/null; then
    redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$data" >/dev/null 2>&1 &
    pids+=($!)
    wait_for "$redis_port"
    echo "== redis-server on port $redis_port (the check itself)"
    java -cp "$out/classes:$cp" JedisCheck "$redis_port" | tail -1
else
    echo "NOTICE: redis-server not found; the check ran against ScaledKV only"
fi
rm -rf "$data"
