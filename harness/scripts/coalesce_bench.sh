#!/usr/bin/env bash
# Coalesced exact decisions on Redis against calls of their own, in one run on one private
# redis-server (started here on a free loopback port, stopped on exit), so that no other client's
# scripts reach its INFO commandstats:
#
#   1. redis_cost: Redis CPU per call of the naive reference script and of flowguard's script
#      alone (least disturbed of 3 rounds);
#   2. --rounds times, each pair back to back: redis_load --coalesce on / off at --tasks 64 and at
#      --tasks 1, and the two-tier mode (--two-tier 50) on / off at --tasks 64.
#
#   harness/scripts/coalesce_bench.sh [--rounds 3] [--seconds 3] [--out FILE]
#
# Every redis_load JSON line goes to FILE (default target/coalesce_bench.jsonl) with a "label"
# field; redis_cost's JSON line too. Ratios are taken within a pair: the machine may be shared.
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=3 seconds=3 out=target/coalesce_bench.jsonl
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "coalesce_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

cargo build --release -q -p flowguard-harness --bin redis_load --bin redis_cost
. harness/scripts/free_port.sh
port=$(free_port coalesce_bench.sh)
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  --logfile "$dir/redis.log" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$dir"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
url="redis://127.0.0.1:$port"
: >"$out"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; $(redis-server --version)" >&2

target/release/redis_cost --redis "$url" --allow-flush --calls 20000 --rounds 3 --json 2>/dev/null |
  tail -n1 | sed 's/^{/{"label":"redis_cost",/' >>"$out"
redis-cli -p "$port" flushall >/dev/null

load() { # label, then redis_load's flags
  local label=$1; shift
  target/release/redis_load --redis "$url" --seconds "$seconds" --json "$@" | tail -n1 |
    sed "s/^{/{\"label\":\"$label\",/" >>"$out"
  tail -n1 "$out" >&2
}
for round in $(seq "$rounds"); do
  load "r$round tasks64 on" --tasks 64 --coalesce on
  load "r$round tasks64 off" --tasks 64 --coalesce off
  load "r$round tasks1 on" --tasks 1 --coalesce on
  load "r$round tasks1 off" --tasks 1 --coalesce off
  load "r$round twotier64 on" --tasks 64 --coalesce on --two-tier 50 --keys 10000
  load "r$round twotier64 off" --tasks 64 --coalesce off --two-tier 50 --keys 10000
done
echo "results in $out" >&2
