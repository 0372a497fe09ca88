#!/usr/bin/env bash
# Coalesced exact decisions on Redis against calls of their own, in one run on one private
# redis-server (started here on a free loopback port, stopped on exit), so that no other client's
# scripts reach its INFO commandstats:
#
#   1. redis_cost: Redis CPU per call of the naive reference script and of flowguard's script
#      alone (least disturbed of 3 rounds);
#   2. --rounds times, each pair back to back (alternating which goes first), each run on an
#      emptied server: redis_load --coalesce on / off at --tasks 64 and at
#      --tasks 1, the two-tier mode (--two-tier 50) on / off at --tasks 64, and the naive script
#      under the same load (redis_load --script naive --tasks 64: same keys, same working set);
#   3. a summary per round: Redis CPU per coalesced decision against the naive script's per call
#      under the same load and against redis_cost's (a small, cache-resident working set),
#      decisions per second on / off, and the p99 at --tasks 1 on / off.
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
  # Each run starts on an empty server: no keys left expiring from the run before, whose
  # expiry would land on this one.
  redis-cli -p "$port" flushall >/dev/null
  target/release/redis_load --redis "$url" --seconds "$seconds" --json "$@" | tail -n1 |
    sed "s/^{/{\"label\":\"$label\",/" >>"$out"
  tail -n1 "$out" >&2
}
# pair LABEL FLAGS...: coalescing on and off with FLAGS, on first in odd rounds and off first in
# even ones, so that neither side always runs first.
pair() {
  local label=$1; shift
  if ((round % 2)); then
    load "r$round $label on" "$@" --coalesce on
    load "r$round $label off" "$@" --coalesce off
  else
    load "r$round $label off" "$@" --coalesce off
    load "r$round $label on" "$@" --coalesce on
  fi
}
for round in $(seq "$rounds"); do
  pair tasks64 --tasks 64
  pair tasks1 --tasks 1
  pair twotier64 --tasks 64 --two-tier 50 --keys 10000
  load "r$round naive64" --tasks 64 --script naive
done

# field LABEL NAME: the number NAME of the line labelled LABEL (the cost object's for redis_cost).
field() {
  grep -F "\"label\":\"$1\"" "$out" | head -n1 | grep -o "\"$2\":[0-9.e+-]*" | head -n1 | cut -d: -f2
}
naive_cost=$(grep -F '"label":"redis_cost"' "$out" | grep -o '"naive":[0-9.]*' | head -n1 | cut -d: -f2)
echo "summary (redis_cost's naive script: $naive_cost us per call):" >&2
for round in $(seq "$rounds"); do
  on=$(field "r$round tasks64 on" redis_us_per_decision)
  naive=$(field "r$round naive64" redis_us_per_decision)
  awk -v r="$round" -v on="$on" -v naive="$naive" -v cost="$naive_cost" \
    -v dps_on="$(field "r$round tasks64 on" decisions_per_sec)" \
    -v dps_off="$(field "r$round tasks64 off" decisions_per_sec)" \
    -v p99_on="$(field "r$round tasks1 on" p99_us)" -v p99_off="$(field "r$round tasks1 off" p99_us)" \
    'BEGIN {
      printf "  r%d: Redis us per coalesced decision %.2f = %.3fx the naive script under the same load (%.2f), %.3fx redis_cost'"'"'s; decisions/s on/off %.0f/%.0f = %.2fx; tasks 1 p99 on/off %d/%d us\n",
        r, on, on / naive, naive, on / cost, dps_on, dps_off, dps_on / dps_off, p99_on, p99_off
    }' >&2
done
echo "results in $out" >&2
