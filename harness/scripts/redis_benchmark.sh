#!/usr/bin/env bash
# Client-side throughput reference for flowguard's Redis GCRA script.
#
# Runs `redis-benchmark` with EVALSHA of src/gcra/redis/lone.lua, the script of a decision alone
# (server time, cost 1, random keys)
# at a given concurrency and prints requests/s: the ceiling a Rust client driving the same script
# at the same concurrency should get close to (the goal: at least 0.9x).
#
#   harness/scripts/redis_benchmark.sh [-c 64] [-P 1] [-n 200000] [-r 100000] [--interval-us 1000] [--burst 1000]
#                              [--threads N] [--repeat 3] [--host H --port P] [--compare [--seconds 3]] [--json]
#
# -c is redis-benchmark's connections, each with -P requests in flight (pipelining). A Rust client
# on ONE multiplexed connection with T tasks has up to T requests in flight on one socket, so the
# like-for-like reference for `--tasks 64` is `-c 1 -P 64`; `-c 64 -P 1` (64 sockets, one request
# each) costs the server a read and a write per request and is the slower, classic figure.
#
# Each side runs --repeat times; the best run is the figure (on a shared machine other processes
# can only slow a run down), the median is printed too.
#
# A Rust-side reference without the store: `cargo run --release -p flowguard-harness --bin
# redis_cost -- --throughput --concurrency 64 --calls 200000` (raw EVALSHA, one multiplexed
# connection, same keys and quota).
# Without --port it starts its own redis-server on a free loopback port (no persistence) and
# stops it on exit. With --port it uses that server as is (no FLUSHALL, no CONFIG RESETSTAT).
#
# Comparing with the Rust client (harness/src/bin/redis_load.rs):
#   --compare runs, against the same server and after redis-benchmark,
#     cargo run --release -p flowguard-harness --bin redis_load -- \
#       --redis redis://HOST:PORT/ --tasks C*P --seconds S --json
#   and divides its `decisions_per_sec` (last stdout line) by the redis-benchmark figure. By hand:
#   start a server, run this script with --port, then the command above with the same port and
#   --tasks equal to -c x -P. Use the same quota on both sides when redis_load lets you choose one: the
#   allowed path (GET + SET) costs the server more than the denied path (GET only).
#
# On a 2-core machine the benchmark client and the server compete for CPU (and so do
# redis_load and the server): compare figures taken on the same machine, in the same state,
# preferably alternating the two a few times.
set -euo pipefail
cd "$(dirname "$0")/../.."

host=127.0.0.1 port="" clients=64 pipeline=1 requests=200000 keyspace=100000
interval_us=1000 burst=1000 threads="" compare=0 seconds=3 json=0 repeat=3

usage() { sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; }
# best and median of numbers on stdin, one per line: "BEST MEDIAN"
best_median() { sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%s %s\n", v[NR], m }'; }
need_value() { [ $# -ge 2 ] || { echo "redis_benchmark.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    -c | --clients) need_value "$@"; clients=$2; shift 2 ;;
    -P | --pipeline) need_value "$@"; pipeline=$2; shift 2 ;;
    -n | --requests) need_value "$@"; requests=$2; shift 2 ;;
    -r | --keys) need_value "$@"; keyspace=$2; shift 2 ;;
    --interval-us) need_value "$@"; interval_us=$2; shift 2 ;;
    --burst) need_value "$@"; burst=$2; shift 2 ;;
    --threads) need_value "$@"; threads=$2; shift 2 ;;
    --host) need_value "$@"; host=$2; shift 2 ;;
    --port) need_value "$@"; port=$2; shift 2 ;;
    --seconds) need_value "$@"; seconds=$2; shift 2 ;;
    --repeat) need_value "$@"; repeat=$2; shift 2 ;;
    --compare) compare=1; shift ;;
    --json) json=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "redis_benchmark.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
for n in "$clients" "$pipeline" "$requests" "$keyspace" "$interval_us" "$burst" "$seconds" "$repeat" ${threads:+"$threads"}; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "redis_benchmark.sh: '$n' is not a positive integer" >&2; exit 2; }
done
for tool in redis-cli redis-benchmark; do
  command -v "$tool" >/dev/null || { echo "redis_benchmark.sh: $tool not found (apt-get install redis-tools)" >&2; exit 2; }
done

server_pid=""
cleanup() { if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "$port" ]; then
  command -v redis-server >/dev/null || { echo "redis_benchmark.sh: redis-server not found; pass --port" >&2; exit 2; }
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do
    redis-cli -h "$host" -p "$port" PING >/dev/null 2>&1 && break
    sleep 0.05
  done
  echo "started redis-server on $host:$port (pid $server_pid)" >&2
fi
cli() { redis-cli -h "$host" -p "$port" "$@"; }
cli PING >/dev/null || { echo "redis_benchmark.sh: no Redis answers at $host:$port" >&2; exit 1; }

script=src/gcra/redis/lone.lua
body=$(cat "$script")
sha=$(cli SCRIPT LOAD "$body")
[ "$sha" = "$(printf '%s' "$body" | sha1sum | cut -d' ' -f1)" ] || { echo "redis_benchmark.sh: SCRIPT LOAD returned '$sha'" >&2; exit 1; }
# The script's arguments for cost 1 when T is a whole number of us: n*T and B*T.
window_us=$((interval_us * burst))
# One real decision first: the server's time back (unix seconds and microseconds), or the
# arguments are wrong.
reply=$(cli EVALSHA "$sha" 1 bench:probe "$interval_us" "$window_us")
[[ "$reply" =~ ^[0-9]+\ [0-9]+$ ]] || { echo "redis_benchmark.sh: the script did not return a decision: $reply" >&2; exit 1; }

own=0; [ -n "$server_pid" ] && own=1
[ "$own" = 1 ] && cli CONFIG RESETSTAT >/dev/null

# One request: n*T, B*T (server time).
cmd=(EVALSHA "$sha" 1 "key:__rand_int__" "$interval_us" "$window_us")
echo "redis-benchmark -h $host -p $port -c $clients -P $pipeline -n $requests -r $keyspace ${threads:+--threads $threads }-q ${cmd[*]}   (x$repeat)" >&2
runs=""
for _ in $(seq "$repeat"); do
  line=$(redis-benchmark -h "$host" -p "$port" -c "$clients" -P "$pipeline" -n "$requests" -r "$keyspace" \
    ${threads:+--threads "$threads"} -q "${cmd[@]}" 2>&1 | tr '\r' '\n' | grep 'requests per second' | tail -1)
  one=$(sed -E 's/.*: ([0-9.]+) requests per second.*/\1/' <<<"$line")
  [[ "$one" =~ ^[0-9.]+$ ]] || { echo "redis_benchmark.sh: could not read requests/s from: $line" >&2; exit 1; }
  echo "  run: $one requests/s" >&2
  runs="$runs$one"$'\n'
done
read -r rps rps_median < <(printf '%s' "$runs" | best_median)
echo "redis-benchmark, flowguard EVALSHA: $rps requests/s best of $repeat (median $rps_median) (clients $clients, pipeline $pipeline, requests $requests, keys $keyspace, quota T=${interval_us}us B=$burst)"

usec_per_call=null
if [ "$own" = 1 ]; then
  usec_per_call=$(cli INFO commandstats | tr -d '\r' | sed -nE 's/^cmdstat_evalsha:.*usec_per_call=([0-9.]+).*/\1/p')
  echo "server CPU under this load: cmdstat_evalsha usec_per_call = $usec_per_call"
fi

load_dps=null ratio=null
if [ "$compare" = 1 ]; then
  if [ ! -f harness/src/bin/redis_load.rs ]; then
    echo "redis_benchmark.sh: --compare needs harness/src/bin/redis_load.rs" >&2
    exit 1
  fi
  tasks=$((clients * pipeline))
  load_cmd=(cargo run --quiet --release -p flowguard-harness --bin redis_load -- --redis "redis://$host:$port/" --tasks "$tasks" --seconds "$seconds" --json)
  echo "${load_cmd[*]}" >&2
  load_runs=""
  for _ in $(seq "$repeat"); do
    load_json=$("${load_cmd[@]}" | tail -1)
    one=$(python3 -c 'import json, sys; print(float(json.loads(sys.stdin.read())["decisions_per_sec"]))' <<<"$load_json" 2>/dev/null || true)
    [ -n "$one" ] || { echo "redis_benchmark.sh: no decisions_per_sec in: $load_json" >&2; exit 1; }
    echo "  run: $one decisions/s" >&2
    load_runs="$load_runs$one"$'\n'
  done
  read -r load_dps load_median < <(printf '%s' "$load_runs" | best_median)
  ratio=$(awk -v a="$load_dps" -v b="$rps" 'BEGIN { printf "%.3f", a / b }')
  echo "redis_load: $load_dps decisions/s best of $repeat (median $load_median) = ${ratio}x redis-benchmark (target >= 0.9)"
fi

if [ "$json" = 1 ]; then
  printf '{"redis_benchmark_rps":%s,"redis_benchmark_rps_median":%s,"clients":%s,"pipeline":%s,"requests":%s,"keys":%s,"interval_us":%s,"burst":%s,"server_usec_per_call":%s,"redis_load_decisions_per_sec":%s,"ratio_redis_load_vs_benchmark":%s}\n' \
    "$rps" "$rps_median" "$clients" "$pipeline" "$requests" "$keyspace" "$interval_us" "$burst" "${usec_per_call:-null}" "$load_dps" "$ratio"
fi
