#!/usr/bin/env bash
# HyperLogLogs side by side: scaledkv-server (`sync`, data on /dev/shm)
# against redis-server without persistence, under redis-benchmark, one
# server after the other on a fresh process, REPEATS rounds (default 3).
# Per server: PFADD of 3 elements to new keys at -P 1, the same at -P 16
# (sparse HyperLogLogs), PFADD of one element to one dense key at -P 16
# (a HyperLogLog of 5,000 elements first), and PFCOUNT of that key at
# -P 1 (its cached count); requests/s and the server's CPU µs per request
# (from /proc). Every process started here is stopped by its PID.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools
fi
cargo build --release -p scaledkv-server
server_bin="$PWD/target/release/scaledkv-server"
port=26396
dir=/dev/shm/scaledkv-compare-hll
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run() { # run PID N ARGS...: requests/s and CPU us per request
    local pid=$1 n=$2; shift 2
    local before; before=$(cpu "$pid")
    local rps; rps=$(redis-benchmark -p "$port" -c 50 -n "$n" --csv "$@" | tail -1 | cut -d, -f2 | tr -d '"')
    local after; after=$(cpu "$pid")
    printf '%s (%.1f µs)' "$rps" "$(echo "($after - $before) * 1000000 / $(getconf CLK_TCK) / $n" | bc -l)"
}
for round in $(seq "${REPEATS:-3}"); do
    for server in scaledkv redis; do
        rm -rf "$dir"
        if [ "$server" = scaledkv ]; then
            "$server_bin" --dir "$dir" --port "$port" >/dev/null 2>&1 &
        else
            redis-server --port "$port" --save "" --appendonly no >/dev/null 2>&1 &
        fi
        pid=$!
        until redis-cli -p "$port" PING >/dev/null 2>&1; do sleep 0.05; done
        redis-cli -p "$port" PFADD warm $(seq 1 5000 | sed 's/^/w/') >/dev/null
        echo "round $round $server:" \
            "PFADD new -P 1 $(run "$pid" 300000 -r 100000 -P 1 PFADD hll:__rand_int__ a b c)," \
            "PFADD sparse -P 16 $(run "$pid" 600000 -r 100000 -P 16 PFADD hll:__rand_int__ d e f)," \
            "PFADD one dense key -P 16 $(run "$pid" 300000 -r 1000000 -P 16 PFADD warm __rand_int__)," \
            "PFCOUNT -P 1 $(run "$pid" 300000 -P 1 PFCOUNT warm)"
        kill "$pid"; wait "$pid" 2>/dev/null || true
    done
done
rm -rf "$dir"
