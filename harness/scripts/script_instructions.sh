#!/usr/bin/env bash
# Server instructions per decision of flowguard's scripts (src/gcra/redis/lone.lua for a decision
# alone, src/gcra/redis/gcra.lua for a coalesced call), per call of the naive reference script
# (harness/scripts/naive_gcra.lua) and per decision of the floor of a coalesced call on this data
# layout (harness/scripts/floor_gcra.lua: one MGET, one SET .. PX per key, values given by the
# client; the floor with SET .. PX .. GET too), counted by valgrind's callgrind in a private
# redis-server on a free loopback port (started here, stopped on exit).
#
# Unlike INFO commandstats time, an instruction count does not move when other processes share
# the machine, so a change to the script can be priced on a busy machine. The figure is the
# instructions inside EVALSHA (callgrind's inclusive count of evalGenericCommand: the script, the
# commands it calls, its arguments and its reply; not the network or serverCron) divided by the
# decisions, with random keys among --keys (100/s burst 100: every decision allowed, as in
# redis_load's default workload).
#
#   harness/scripts/script_instructions.sh [--calls 300] [--batch 32] [--keys 100000] [--stored]
#                                          [--module PATH]
#
# --stored: a quota of one per 10 s, burst 100 (T = 10 s, B*T = 1,000 s) instead of 100/s, so a
# key's TTL is 10 s or more and a key decided before is still there: with --keys 1000 nearly
# every decision reads and parses a stored value (the default quota's 10 ms TTLs expire between
# calls under valgrind, so nearly every key is new). Every decision is still allowed.
#
# --module PATH loads redis-cell (a built libredis_cell.so, see cell_bench.sh for building one;
# nothing of it is in this repository) and counts its native CL.THROTTLE too (the module
# command's inclusive count, RedisModuleCommandDispatcher, 100/s burst 100 as the scripts).
#
# Prints one line per workload: the naive script (one decision per call), flowguard alone
# (lone.lua, one decision per call), flowguard coalesced (gcra.lua in mode 'u', distinct keys,
# --batch decisions per call) and the floors (--batch keys per call), then the ratios to the naive
# script's.
# Needs valgrind (callgrind_control, callgrind_annotate), redis-server and redis-benchmark.
set -euo pipefail
cd "$(dirname "$0")/../.."

calls=300 batch=32 keys=100000 module="" stored=0
while [ $# -gt 0 ]; do
  case "$1" in
    --calls) calls=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --module) module=$2; shift 2 ;;
    --stored) stored=1; shift ;;
    *) echo "script_instructions.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

. harness/scripts/free_port.sh
port=$(free_port script_instructions.sh)
dir=$(mktemp -d)
load=()
if [ -n "$module" ]; then
  [ -f "$module" ] || { echo "script_instructions.sh: no module at $module" >&2; exit 2; }
  load=(--loadmodule "$(cd "$(dirname "$module")" && pwd)/$(basename "$module")")
fi
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" redis-server --port "$port" \
  --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" "${load[@]}" >"$dir/valgrind.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 600); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
redis-cli -p "$port" ping >/dev/null
echo "$(redis-server --version)" >&2

# measure DECISIONS_PER_CALL redis-benchmark's command...: instructions per decision, counted in
# the function that runs the command (evalGenericCommand for EVALSHA, RedisModuleCommandDispatcher
# for a module's command).
measure() {
  local per_call=$1; shift
  local symbol=evalGenericCommand
  [ "$1" = EVALSHA ] || symbol=RedisModuleCommandDispatcher
  redis-cli -p "$port" flushall >/dev/null
  redis-benchmark -p "$port" -q -n 100 -c 2 -r "$keys" "$@" >/dev/null
  callgrind_control -z "$server" >/dev/null
  redis-benchmark -p "$port" -q -n "$calls" -c 2 -r "$keys" "$@" >/dev/null
  callgrind_control -d "$server" >/dev/null
  local dump
  dump=$(ls -t "$dir"/cg.* | head -n1)
  local ir
  ir=$(callgrind_annotate --inclusive=yes --threshold=100 "$dump" 2>/dev/null |
    awk -v sym=":$symbol " 'index($0, sym) && !found {gsub(",", "", $1); found = $1} END {print found}')
  echo $((ir / (calls * per_call)))
}

naive=$(redis-cli -p "$port" script load "$(cat harness/scripts/naive_gcra.lua)")
lone=$(redis-cli -p "$port" script load "$(cat src/gcra/redis/lone.lua)")
flowguard=$(redis-cli -p "$port" script load "$(cat src/gcra/redis/gcra.lua)")
floor=$(redis-cli -p "$port" script load "$(cat harness/scripts/floor_gcra.lua)")
# The quota: T and B*T in microseconds (100/s, burst 100; --stored: one per 10 s, burst 100), the
# naive script's T in seconds and redis-cell's rate (per period in seconds).
t_us=10000 naive_t=0.01 cell_rate=(100 1)
if [ "$stored" = 1 ]; then t_us=10000000 naive_t=10 cell_rate=(1 10); fi
window_us=$((t_us * 100))
# lone.lua's arguments: n*T, B*T (server time, whole microseconds).
lone_args=("$t_us" "$window_us")
# gcra.lua's arguments after the mode and n: one rule (den 1, B*T, server time, no extra TTL),
# one kind (rule 1, T).
args=(1 1 "$window_us" 0 "" 0 1 1 "$t_us" 0)
# One real decision of each first: the time (and a TAT) back, or the arguments are wrong.
reply=$(redis-cli -p "$port" EVALSHA "$lone" 1 probe "${lone_args[@]}")
case "$reply" in
  [0-9]*" "[0-9]*) ;;
  *) echo "script_instructions.sh: lone.lua did not decide: $reply" >&2; exit 1 ;;
esac
reply=$(redis-cli -p "$port" EVALSHA "$flowguard" 2 probe probe2 u 2 "${args[@]}" | tr '\n' ' ')
case "$reply" in
  [0-9]*" "[0-9]*" "[0-9]*" ") ;;
  *) echo "script_instructions.sh: gcra.lua did not decide: $reply" >&2; exit 1 ;;
esac
batch_keys=() floor_values=() floor_ttls=()
for i in $(seq "$batch"); do
  batch_keys+=("k:__rand_int__")
  # What gcra.lua writes for a fresh key under this quota: its TAT T after now (14 digits), T in ms.
  floor_values+=("$((96000000000000 + i))")
  floor_ttls+=("$((t_us / 1000))")
done

naive_ir=$(measure 1 EVALSHA "$naive" 1 "k:__rand_int__" 1764495532.123456 "$naive_t" 100 1)
lone_ir=$(measure 1 EVALSHA "$lone" 1 "k:__rand_int__" "${lone_args[@]}")
coalesced_ir=$(measure "$batch" EVALSHA "$flowguard" "$batch" "${batch_keys[@]}" u "$batch" "${args[@]}")
floor_ir=$(measure "$batch" EVALSHA "$floor" "$batch" "${batch_keys[@]}" set "${floor_values[@]}" "${floor_ttls[@]}")
floor_get_ir=$(measure "$batch" EVALSHA "$floor" "$batch" "${batch_keys[@]}" get "${floor_values[@]}" "${floor_ttls[@]}")
echo "naive script: $naive_ir instructions per decision ($calls calls of 1)"
echo "flowguard alone: $lone_ir instructions per decision ($calls calls of 1)"
echo "flowguard coalesced: $coalesced_ir instructions per decision ($calls calls of $batch)"
echo "floor of a coalesced call: $floor_ir instructions per decision ($calls calls of $batch)"
echo "floor with SET .. GET: $floor_get_ir instructions per decision ($calls calls of $batch)"
awk -v n="$naive_ir" -v l="$lone_ir" -v c="$coalesced_ir" -v f="$floor_ir" -v g="$floor_get_ir" \
  'BEGIN { printf "ratios to the naive script: alone %.3fx, coalesced %.3fx, floor %.3fx, floor with GET %.3fx; coalesced/floor with GET %.3fx\n", l / n, c / n, f / n, g / n, c / g }'
if [ -n "$module" ]; then
  cell_ir=$(measure 1 CL.THROTTLE "k:__rand_int__" 99 "${cell_rate[@]}" 1)
  echo "redis-cell CL.THROTTLE: $cell_ir instructions per decision ($calls calls of 1)"
  awk -v n="$naive_ir" -v l="$lone_ir" -v c="$coalesced_ir" -v f="$floor_ir" -v g="$floor_get_ir" -v m="$cell_ir" \
    'BEGIN { printf "ratios to CL.THROTTLE: naive %.3fx, alone %.3fx, coalesced %.3fx, floor %.3fx, floor with GET %.3fx\n", n / m, l / m, c / m, f / m, g / m }'
fi
