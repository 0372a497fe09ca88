#!/usr/bin/env bash
# Redis server time per decision of redis-cell's native command (CL.THROTTLE, a Redis module in
# Rust: https://github.com/brandur/redis-cell) against flowguard's scripts and the naive reference
# script, in one run on one private redis-server (started here with the module on a free loopback
# port, stopped on exit), all driven by redis-benchmark alike.
#
#   harness/scripts/cell_bench.sh [--module PATH | --source DIR] [--rounds 3] [--requests 100000]
#                                 [--clients 16] [--pipeline 16] [--keys 100000] [--batch 32]
#
# redis-cell is no dependency and no part of this repository; nothing of it is committed.
#   --module PATH  a built module (libredis_cell.so);
#   --source DIR   a checkout of redis-cell, built here (cargo build --release --lib, its
#                  dependencies from crates.io, into DIR/target);
#   neither        clones https://github.com/brandur/redis-cell into target/redis-cell (needs git
#                  and the network) and builds it.
# When the module cannot be had or built, the script says why and exits 0: the comparison with
# the naive script (coalesce_bench.sh, script_instructions.sh) does not need it.
#
# Each round runs every workload once, starting from a different one each round, each on an
# emptied server after CONFIG RESETSTAT: redis-benchmark --clients connections, --pipeline
# requests in flight each, --requests decisions, keys drawn from --keys (100/s, burst 100: all
# allowed):
#   cell        CL.THROTTLE key 99 100 1 1          one decision per call
#   naive       EVALSHA naive_gcra.lua               one decision per call
#   lone        EVALSHA lone.lua                     one decision per call (flowguard alone)
#   coalesced   EVALSHA gcra.lua, --batch keys       --batch decisions per call (mode 't')
# The figure is INFO commandstats usec_per_call of the command, per decision; ratios are taken
# within a round (the machine may be shared), and the best round of each is printed too.
set -euo pipefail
cd "$(dirname "$0")/../.."

module="" source="" rounds=3 requests=100000 clients=16 pipeline=16 keys=100000 batch=32
while [ $# -gt 0 ]; do
  case "$1" in
    --module) module=$2; shift 2 ;;
    --source) source=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --pipeline) pipeline=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    *) echo "cell_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
skip() { echo "cell_bench.sh: skipped: $*" >&2; exit 0; }
for tool in redis-server redis-cli redis-benchmark; do
  command -v "$tool" >/dev/null || skip "$tool not found"
done

if [ -z "$module" ]; then
  if [ -z "$source" ]; then
    source=target/redis-cell
    if [ ! -f "$source/Cargo.toml" ]; then
      command -v git >/dev/null || skip "no --module or --source, and git is not installed"
      git clone --quiet --depth 1 https://github.com/brandur/redis-cell "$source" ||
        skip "cannot clone https://github.com/brandur/redis-cell (pass --module or --source)"
    fi
  fi
  [ -f "$source/Cargo.toml" ] || skip "$source is not a redis-cell checkout"
  echo "building redis-cell in $source" >&2
  (cd "$source" && cargo build --release --lib --quiet) || skip "redis-cell does not build in $source"
  module=$(ls "$source"/target/release/libredis_cell.so 2>/dev/null | head -n1)
  [ -n "$module" ] || skip "no libredis_cell.so under $source/target/release"
fi
[ -f "$module" ] || skip "no module at $module"
module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")

. harness/scripts/free_port.sh
port=$(free_port cell_bench.sh)
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  --logfile "$dir/redis.log" --loadmodule "$module" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 200); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || skip "redis-server did not start with $module (see its log)"
  sleep 0.05
done
cli() { redis-cli -p "$port" "$@"; }
cli ping >/dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); $(redis-server --version)" >&2

naive=$(cli script load "$(cat harness/scripts/naive_gcra.lua)")
lone=$(cli script load "$(cat src/gcra/redis/lone.lua)")
general=$(cli script load "$(cat src/gcra/redis/gcra.lua)")
# One real decision of each first, or the arguments are wrong.
[ "$(cli CL.THROTTLE probe:cell 99 100 1 1 | head -n1)" = 0 ] || skip "CL.THROTTLE did not allow a first request"
reply=$(cli EVALSHA "$lone" 1 probe:lone 10000 1000000)
[[ "$reply" =~ ^[0-9]+\ [0-9]+$ ]] || { echo "cell_bench.sh: lone.lua did not decide: $reply" >&2; exit 1; }
batch_keys=()
for _ in $(seq "$batch"); do batch_keys+=("k:__rand_int__"); done

# The workloads: name, decisions per call, commandstats name, the command.
names=(cell naive lone coalesced)
declare -A per_call=([cell]=1 [naive]=1 [lone]=1 [coalesced]=$batch)
declare -A stat=([cell]=cl.throttle [naive]=evalsha [lone]=evalsha [coalesced]=evalsha)
run() {
  local calls=$((requests / per_call[$1]))
  case "$1" in
    cell) set -- CL.THROTTLE "k:__rand_int__" 99 100 1 1 ;;
    naive) set -- EVALSHA "$naive" 1 "k:__rand_int__" 1764495532.123456 0.01 100 1 ;;
    lone) set -- EVALSHA "$lone" 1 "k:__rand_int__" 10000 1000000 ;;
    coalesced) set -- EVALSHA "$general" "$batch" "${batch_keys[@]}" t "$batch" 1 1 1000000 0 "" 0 1 1 10000 0 ;;
  esac
  redis-benchmark -p "$port" -q -c "$clients" -P "$pipeline" -n "$calls" -r "$keys" "$@" >/dev/null
}

declare -A best
for round in $(seq "$rounds"); do
  declare -A us=()
  for i in 0 1 2 3; do
    name=${names[$(((i + round - 1) % 4))]}
    cli flushall >/dev/null
    cli config resetstat >/dev/null
    run "$name"
    usec=$(cli info commandstats | tr -d '\r' |
      sed -nE "s/^cmdstat_${stat[$name]}:.*usec_per_call=([0-9.]+).*/\\1/p")
    [ -n "$usec" ] || { echo "cell_bench.sh: no cmdstat_${stat[$name]} after $name" >&2; exit 1; }
    us[$name]=$(awk -v u="$usec" -v n="${per_call[$name]}" 'BEGIN { printf "%.3f", u / n }')
    if [ -z "${best[$name]:-}" ] || awk -v a="${us[$name]}" -v b="${best[$name]}" 'BEGIN { exit !(a < b) }'; then
      best[$name]=${us[$name]}
    fi
  done
  awk -v r="$round" -v c="${us[cell]}" -v n="${us[naive]}" -v l="${us[lone]}" -v g="${us[coalesced]}" -v b="$batch" 'BEGIN {
    printf "round %d, us per decision: CL.THROTTLE %.2f, naive %.2f, lone %.2f, coalesced (%d per call) %.2f; lone/naive %.3f, coalesced/naive %.3f, coalesced/CL.THROTTLE %.3f\n",
      r, c, n, l, b, g, l / n, g / n, g / c
  }'
done
awk -v c="${best[cell]}" -v n="${best[naive]}" -v l="${best[lone]}" -v g="${best[coalesced]}" 'BEGIN {
  printf "best rounds, us per decision: CL.THROTTLE %.2f, naive %.2f, lone %.2f, coalesced %.2f; lone/naive %.3f, coalesced/naive %.3f, coalesced/CL.THROTTLE %.3f\n",
    c, n, l, g, l / n, g / n, g / c
}'
