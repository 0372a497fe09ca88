#!/usr/bin/env bash
# Redis server time per decision of redis-cell's native command (CL.THROTTLE, a Redis module in
# Rust: https://github.com/brandur/redis-cell) against flowguard's scripts, the naive reference
# script and the floor of flowguard's data layout, in one run on one private redis-server
# (started here, with the module when there is one, on a free loopback port, stopped on exit),
# all driven by redis-benchmark alike.
#
#   harness/scripts/cell_bench.sh [--module PATH | --source DIR | --no-cell] [--rounds 3]
#                                 [--requests 100000] [--clients 16] [--pipeline 16]
#                                 [--keys 100000] [--batch 32]
#
# redis-cell is no dependency and no part of this repository; nothing of it is committed.
#   --module PATH  a built module (libredis_cell.so);
#   --source DIR   a checkout of redis-cell outside this repository's workspace, built here
#                  (cargo build --release --lib, its dependencies from crates.io, into
#                  DIR/target);
#   neither        clones https://github.com/brandur/redis-cell into target/redis-cell (needs git
#                  and the network; a checkout already there is used as is), marks it a workspace
#                  of its own (an empty [workspace] table: cargo refuses a package inside this
#                  repository's workspace otherwise) and builds it;
#   --no-cell      measures without it.
# When the module cannot be had or built, the script says why and measures the rest without
# CL.THROTTLE.
#
# Each round runs every workload once, starting from a different one each round, each on an
# emptied server after CONFIG RESETSTAT: redis-benchmark --clients connections, --pipeline
# requests in flight each, --requests decisions, keys drawn from --keys (100/s, burst 100: all
# allowed):
#   cell        CL.THROTTLE key 99 100 1 1          one decision per call
#   naive       EVALSHA naive_gcra.lua               one decision per call
#   lone        EVALSHA lone.lua                     one decision per call (flowguard alone)
#   coalesced   EVALSHA gcra.lua, --batch keys       --batch decisions per call (mode 'u': what
#                                                    the client sends for distinct keys)
#   floor       EVALSHA floor_gcra.lua set, --batch keys
#                                                    the least a coalesced call on this data
#                                                    layout must do: one MGET, then one
#                                                    SET key value PX ttl per key, with each
#                                                    value and TTL given by the client (a
#                                                    14-digit TAT, 10 ms, as gcra.lua writes)
#   floor-get   EVALSHA floor_gcra.lua get, --batch keys
#                                                    the same with SET .. PX ttl GET, which
#                                                    costs a script less (see floor_gcra.lua)
# Two figures per decision: INFO commandstats usec_per_call of the command (wall time inside the
# command, which a busy machine inflates whenever it preempts the server mid-call, and a call of
# 32 decisions is preempted more often than a call of one), and the server's main thread CPU time
# over the whole run (INFO cpu used_cpu_user_main_thread + used_cpu_sys_main_thread: everything
# the server did, reading and answering the requests too, but not time spent preempted). Ratios
# are taken within a round (the machine may be shared), and the best round of each is printed too.
set -euo pipefail
cd "$(dirname "$0")/../.."

module="" source="" cell=1 rounds=3 requests=100000 clients=16 pipeline=16 keys=100000 batch=32
while [ $# -gt 0 ]; do
  case "$1" in
    --module) module=$2; shift 2 ;;
    --source) source=$2; shift 2 ;;
    --no-cell) cell=0; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --pipeline) pipeline=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    *) echo "cell_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for tool in redis-server redis-cli redis-benchmark; do
  command -v "$tool" >/dev/null || { echo "cell_bench.sh: skipped: $tool not found" >&2; exit 0; }
done
# no_cell REASON: measure without redis-cell.
no_cell() { echo "cell_bench.sh: without CL.THROTTLE: $*" >&2; cell=0; module=""; }

if [ "$cell" = 1 ] && [ -z "$module" ]; then
  if [ -z "$source" ]; then
    source=target/redis-cell
    if [ ! -f "$source/Cargo.toml" ]; then
      if ! command -v git >/dev/null; then
        no_cell "no --module or --source, and git is not installed"
      elif ! git clone --quiet --depth 1 https://github.com/brandur/redis-cell "$source"; then
        no_cell "cannot clone https://github.com/brandur/redis-cell (pass --module or --source)"
      fi
    fi
    if [ -f "$source/Cargo.toml" ] && ! grep -q '^\[workspace\]' "$source/Cargo.toml"; then
      printf '\n[workspace]\n' >>"$source/Cargo.toml"
    fi
  fi
  if [ "$cell" = 1 ]; then
    if [ ! -f "$source/Cargo.toml" ]; then
      no_cell "$source is not a redis-cell checkout"
    else
      echo "building redis-cell in $source" >&2
      if (cd "$source" && cargo build --release --lib --quiet); then
        module=$(ls "$source"/target/release/libredis_cell.so 2>/dev/null | head -n1)
        [ -n "$module" ] || no_cell "no libredis_cell.so under $source/target/release"
      else
        no_cell "redis-cell does not build in $source"
      fi
    fi
  fi
fi
load=()
if [ "$cell" = 1 ]; then
  [ -f "$module" ] || { echo "cell_bench.sh: no module at $module" >&2; exit 2; }
  module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")
  load=(--loadmodule "$module")
fi

. harness/scripts/free_port.sh
port=$(free_port cell_bench.sh)
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  --logfile "$dir/redis.log" "${load[@]}" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 200); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { echo "cell_bench.sh: redis-server did not start (${load[*]}): $(tail -n3 "$dir/redis.log")" >&2; exit 1; }
  sleep 0.05
done
cli() { redis-cli -p "$port" "$@"; }
cli ping >/dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); $(redis-server --version)" >&2

naive=$(cli script load "$(cat harness/scripts/naive_gcra.lua)")
lone=$(cli script load "$(cat src/gcra/redis/lone.lua)")
general=$(cli script load "$(cat src/gcra/redis/gcra.lua)")
floor=$(cli script load "$(cat harness/scripts/floor_gcra.lua)")
# One real decision of each first, or the arguments are wrong.
if [ "$cell" = 1 ] && [ "$(cli CL.THROTTLE probe:cell 99 100 1 1 | head -n1)" != 0 ]; then
  echo "cell_bench.sh: CL.THROTTLE did not allow a first request" >&2
  exit 1
fi
reply=$(cli EVALSHA "$lone" 1 probe:lone 10000 1000000)
[[ "$reply" =~ ^[0-9]+\ [0-9]+$ ]] || { echo "cell_bench.sh: lone.lua did not decide: $reply" >&2; exit 1; }
reply=$(cli EVALSHA "$floor" 2 probe:a probe:b get 96000000000000 96000000000001 10 10)
[ "$reply" = 2 ] || { echo "cell_bench.sh: floor_gcra.lua did not write: $reply" >&2; exit 1; }
batch_keys=() floor_values=() floor_ttls=()
for i in $(seq "$batch"); do
  batch_keys+=("k:__rand_int__")
  # The TAT of a fresh key 10 ms after now (about 14 digits: microseconds since 2023-11-14),
  # and its TTL, as gcra.lua writes them under this workload.
  floor_values+=("$((96000000000000 + i))")
  floor_ttls+=(10)
done

# The workloads: name, decisions per call, commandstats name, the command.
names=(naive lone coalesced floor floor-get)
[ "$cell" = 1 ] && names=(cell "${names[@]}")
declare -A per_call=([cell]=1 [naive]=1 [lone]=1 [coalesced]=$batch [floor]=$batch [floor-get]=$batch)
declare -A stat=([cell]=cl.throttle [naive]=evalsha [lone]=evalsha [coalesced]=evalsha [floor]=evalsha
  [floor-get]=evalsha)
declare -A label=([cell]=CL.THROTTLE [naive]=naive [lone]=lone [coalesced]="coalesced ($batch per call)"
  [floor]="floor ($batch per call)" [floor-get]="floor-get ($batch per call)")
run() {
  local calls=$((requests / per_call[$1]))
  case "$1" in
    cell) set -- CL.THROTTLE "k:__rand_int__" 99 100 1 1 ;;
    naive) set -- EVALSHA "$naive" 1 "k:__rand_int__" 1764495532.123456 0.01 100 1 ;;
    lone) set -- EVALSHA "$lone" 1 "k:__rand_int__" 10000 1000000 ;;
    coalesced) set -- EVALSHA "$general" "$batch" "${batch_keys[@]}" u "$batch" 1 1 1000000 0 "" 0 1 1 10000 0 ;;
    floor) set -- EVALSHA "$floor" "$batch" "${batch_keys[@]}" set "${floor_values[@]}" "${floor_ttls[@]}" ;;
    floor-get) set -- EVALSHA "$floor" "$batch" "${batch_keys[@]}" get "${floor_values[@]}" "${floor_ttls[@]}" ;;
  esac
  redis-benchmark -p "$port" -q -c "$clients" -P "$pipeline" -n "$calls" -r "$keys" "$@" >/dev/null
}
# summary TITLE NAME=US=LABEL...: the figures, then the ratios this issue is about.
summary() {
  local title=$1; shift
  awk -v title="$title" -v have_cell="$cell" 'BEGIN {
    for (i = 1; i < ARGC; i++) { split(ARGV[i], kv, "="); us[kv[1]] = kv[2]; what[kv[1]] = kv[3] }
    line = title ":"
    n = split("cell naive lone coalesced floor floor-get", order, " ")
    for (i = 1; i <= n; i++) if (order[i] in us) line = line sprintf(" %s %.2f,", what[order[i]], us[order[i]])
    line = line sprintf(" lone/naive %.3f, coalesced/naive %.3f, floor/naive %.3f, floor-get/naive %.3f, coalesced/floor-get %.3f",
      us["lone"] / us["naive"], us["coalesced"] / us["naive"], us["floor"] / us["naive"], us["floor-get"] / us["naive"],
      us["coalesced"] / us["floor-get"])
    if (have_cell == 1) line = line sprintf(", coalesced/CL.THROTTLE %.3f, floor/CL.THROTTLE %.3f, floor-get/CL.THROTTLE %.3f",
      us["coalesced"] / us["cell"], us["floor"] / us["cell"], us["floor-get"] / us["cell"])
    print line
    ARGC = 1
  }' "$@"
}

# The server's main thread CPU time so far, in seconds (user + system, from getrusage).
cpu_seconds() {
  cli info cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user)_main_thread:/ { s += $2 } END { printf "%.6f", s }'
}

# lower ARRAY NAME VALUE: ARRAY[NAME]=VALUE when it has no value yet or a higher one.
lower() {
  local -n into=$1
  if [ -z "${into[$2]:-}" ] || awk -v a="$3" -v b="${into[$2]}" 'BEGIN { exit !(a < b) }'; then
    into[$2]=$3
  fi
}
# report TITLE US CPU: the summaries of the figures in the arrays named US and CPU.
report() {
  local -n of_us=$2 of_cpu=$3
  local us_args=() cpu_args=() name
  for name in "${names[@]}"; do
    us_args+=("$name=${of_us[$name]}=${label[$name]}")
    cpu_args+=("$name=${of_cpu[$name]}=${label[$name]}")
  done
  summary "$1, commandstats us per decision" "${us_args[@]}"
  summary "$1, server CPU us per decision" "${cpu_args[@]}"
}

declare -A best best_cpu
for round in $(seq "$rounds"); do
  declare -A us=() cpu=()
  for i in $(seq 0 $((${#names[@]} - 1))); do
    name=${names[$(((i + round - 1) % ${#names[@]}))]}
    cli flushall >/dev/null
    cli config resetstat >/dev/null
    before=$(cpu_seconds)
    run "$name"
    after=$(cpu_seconds)
    cpu[$name]=$(awk -v a="$after" -v b="$before" -v n="$(((requests / per_call[$name]) * per_call[$name]))" \
      'BEGIN { printf "%.3f", (a - b) * 1e6 / n }')
    usec=$(cli info commandstats | tr -d '\r' |
      sed -nE "s/^cmdstat_${stat[$name]}:.*usec_per_call=([0-9.]+).*/\\1/p")
    [ -n "$usec" ] || { echo "cell_bench.sh: no cmdstat_${stat[$name]} after $name" >&2; exit 1; }
    us[$name]=$(awk -v u="$usec" -v n="${per_call[$name]}" 'BEGIN { printf "%.3f", u / n }')
    lower best "$name" "${us[$name]}"
    lower best_cpu "$name" "${cpu[$name]}"
  done
  report "round $round" us cpu
done
report "best rounds" best best_cpu
