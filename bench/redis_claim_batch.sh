#!/usr/bin/env bash
# Redis CPU per claim: N claim scripts pipelined (what group commit sends, shard-router/src/
# batch.rs) against one batch script running the same N claims in one EVALSHA (the issue's
# candidate: claim.lua's body as a Lua function, each claim its own 7 keys and 8 args, under
# pcall). A private redis-server (reniced to -20) on a free port, one SKU preheated on one
# shard with stock that never runs out and 1 000 users already counted; each claim has its
# own user and request id, like bench/external/claims.lua. redis-benchmark is the client
# (-c 1: group commit keeps one batch in flight per queue), so its own CPU is not Redis's.
#
#   bench/redis_claim_batch.sh                  # N = 1 4 8 16, 3 reps, 200 000 claims each
#   NS="4 8" REPS=5 CLAIMS=60000 bench/redis_claim_batch.sh
#   REPLICA=1 ...      # a replica attached: the master also propagates each script's
#                      # effects (Redis 7 wraps them in MULTI/EXEC per script)
#   CALLGRIND=1 ...    # redis-server under callgrind: user-space instructions per claim,
#                      # the same count however loaded the machine is (use CLAIMS=4000)
#   EMPTY=1 ...        # scripts that only return: the fixed cost of an EVALSHA with a
#                      # claim's 15 arguments, the most a batch script could save
#   FLOOR=1 ...        # the least any claim script could do (take the unit, count the
#                      # user, one-field record, remember the request id; no checks): the
#                      # floor under Redis's CPU per claim (docs/BENCHMARKS.md, "Floors")
#
# Prints per run and mode: process CPU µs per claim (utime + stime of redis-server over the
# run; with CALLGRIND=1 thousands of instructions instead) and EVALSHA µs per claim from
# INFO commandstats; then the medians. SINGLE / BATCH override the two scripts.
#
# Results: docs/BENCHMARKS.md, "Redis CPU per claim with the consumer running" (batch
# script) and "Floors".
set -euo pipefail

root=${FG_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
NS=${NS:-"1 4 8 16"}
REPS=${REPS:-3}
CLAIMS=${CLAIMS:-200000}
REPLICA=${REPLICA:-0}
CALLGRIND=${CALLGRIND:-0}
EMPTY=${EMPTY:-0}
FLOOR=${FLOOR:-0}
work=$(mktemp -d /tmp/fg-claim-batch.XXXXXX)

if [[ $EMPTY == 1 ]]; then
  SINGLE=$work/single.lua
  BATCH=$work/batch.lua
  echo 'return {1}' >"$SINGLE"
  printf '%s\n' 'local out = {}' 'for i = 1, #KEYS / 7 do out[i] = {1} end' 'return out' >"$BATCH"
fi
if [[ $FLOOR == 1 ]]; then
  # Four commands, the writes every claim needs; the window, limit and replay checks and
  # the user's sequence are left out, so no real claim script can cost less than this.
  SINGLE=$work/floor.lua
  cat >"$SINGLE" <<'LUA'
local left = redis.call('DECRBY', KEYS[1], ARGV[3])
local held = redis.call('HINCRBY', KEYS[3], ARGV[2], ARGV[3])
local id = redis.call('XADD', KEYS[6], '*', 'c1',
  ARGV[1] .. '|' .. ARGV[2] .. '|' .. ARGV[3] .. '|' .. ARGV[7] .. '|' .. ARGV[4])
redis.call('SET', KEYS[7], id, 'EX', ARGV[8])
return {1, id, held, left}
LUA
fi
SINGLE=${SINGLE:-$root/lua/claim.lua}
if [[ -z ${BATCH:-} ]]; then
  # The prototype: the single script's body (claim.lua's) unchanged, as a function whose
  # parameters shadow the globals KEYS and ARGV, run once per claim under pcall. Redis
  # does not roll back a script's writes when it raises, as with one script per claim.
  BATCH=$work/batch.lua
  {
    echo 'local function claim(KEYS, ARGV)'
    cat "$SINGLE"
    cat <<'EOF'
end
local out = {}
for i = 0, #KEYS / 7 - 1 do
  local k, a = i * 7, i * 8
  local ok, r = pcall(claim,
    {KEYS[k+1], KEYS[k+2], KEYS[k+3], KEYS[k+4], KEYS[k+5], KEYS[k+6], KEYS[k+7]},
    {ARGV[a+1], ARGV[a+2], ARGV[a+3], ARGV[a+4], ARGV[a+5], ARGV[a+6], ARGV[a+7], ARGV[a+8]})
  if ok then
    out[i + 1] = r
  else
    out[i + 1] = redis.error_reply(type(r) == 'table' and r.err or tostring(r))
  end
end
return out
EOF
  } >"$BATCH"
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

start_redis() { # port dir [extra...]
  local port=$1 dir=$2 wrap=()
  shift 2
  mkdir -p "$dir"
  if [[ $CALLGRIND == 1 && $dir == "$work/master" ]]; then
    wrap=(valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" --dump-instr=no)
    # serverCron's work is per second, not per claim, and valgrind stretches the seconds.
    set -- "$@" --hz 1
  fi
  "${wrap[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" "$@" \
    >"$dir/log" 2>&1 &
  pids+=($!)
  for _ in $(seq 400); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "redis-server :$port did not start" >&2
  exit 1
}

port=$(free_port)
start_redis "$port" "$work/master"
pid=${pids[0]}
renice -n -20 -p "$pid" >/dev/null 2>&1 || echo "(renice failed: not root?)" >&2
cli() { redis-cli -p "$port" "$@"; }
if [[ $REPLICA == 1 ]]; then
  rport=$(free_port)
  start_redis "$rport" "$work/replica" --replicaof 127.0.0.1 "$port"
  for _ in $(seq 100); do
    cli info replication | grep -q 'state=online' && break
    sleep 0.1
  done
  cli info replication | grep -q 'state=online' || { echo "replica not online" >&2; exit 1; }
fi

single_sha=$(cli -x script load <"$SINGLE")
batch_sha=$(cli -x script load <"$BATCH")
tag='{fg:0:1}'
sku=1

preheat() {
  cli flushall >/dev/null
  cli eval "$(cat "$root/lua/preheat.lua")" 2 "$tag:stock:$sku" "$tag:meta:$sku" \
    1000000000000 1000000000 0 9000000000000 >/dev/null
  # A sale past its first users: the per-user hashes are past their listpack size (a
  # listpack is searched linearly, which would weigh the first few hundred claims).
  cli eval "for i = 1, 1000 do redis.call('HSET', KEYS[1], 'p' .. i, 1)
    redis.call('HSET', KEYS[2], 'p' .. i, 1) end" 2 "$tag:users:$sku" "$tag:useq:$sku" >/dev/null
}

# One claim's 7 keys and 8 args, with a request id (lua/claim.lua's header; the batch above cuts ARGV by it), fresh user and request id per request (__rand_int__).
claim_keys=("$tag:stock:$sku" "$tag:meta:$sku" "$tag:users:$sku" "$tag:useq:$sku"
  "$tag:holds:$sku" "$tag:claims" "$tag:req:$sku:13:u__rand_int__:r__rand_int__")
claim_args() { # now_ms
  echo "$sku" u__rand_int__ 1 "$1" 0 30000 r__rand_int__ 86400
}

if [[ $CALLGRIND == 1 ]]; then
  # Instructions instead of CPU time: the same count however loaded the machine is.
  # Reported in the cpu column as thousands of instructions per claim. Each dump holds
  # what ran since the previous one.
  cpu_ticks() {
    callgrind_control -d "$pid" >/dev/null 2>&1
    local f
    f=$(ls -v "$work"/cg.out* | tail -1)
    sed -n 's/^totals: \([0-9]*\).*/\1/p' "$f"
  }
  hz=1000000000
  unit=kinstr
else
  unit=us
  cpu_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
  hz=$(getconf CLK_TCK)
fi
evalsha_usec() { cli info commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=[0-9]*,usec=\([0-9]*\),.*/\1/p'; }

run() { # mode n -> "cpu_us evalsha_us" per claim
  local mode=$1 n=$2 now reqs args=() i
  now=$(date +%s%3N)
  preheat
  if [[ $mode == single ]]; then
    # shellcheck disable=SC2207
    args=(evalsha "$single_sha" 7 "${claim_keys[@]}" $(claim_args "$now"))
    reqs=$CLAIMS
    pipeline=$n
  else
    local keys=() argv=()
    for ((i = 0; i < n; i++)); do
      keys+=("${claim_keys[@]}")
      # shellcheck disable=SC2207
      argv+=($(claim_args "$now"))
    done
    args=(evalsha "$batch_sha" $((7 * n)) "${keys[@]}" "${argv[@]}")
    reqs=$((CLAIMS / n))
    pipeline=1
  fi
  cli config resetstat >/dev/null
  local t0 t1
  t0=$(cpu_ticks)
  redis-benchmark -p "$port" -c 1 -P "$pipeline" -n "$reqs" -r 1000000000 -q "${args[@]}" >/dev/null
  t1=$(cpu_ticks)
  local claims=$reqs
  [[ $mode == batch ]] && claims=$((reqs * n))
  local got
  got=$(cli xlen "$tag:claims")
  if [[ $EMPTY == 0 ]] && ((got != claims)); then
    echo "mode=$mode n=$n: $got records for $claims claims" >&2
    exit 1
  fi
  local d=$((t1 - t0))
  [[ $CALLGRIND == 1 ]] && d=$t1
  awk -v d="$d" -v hz="$hz" -v c="$claims" -v u="$(evalsha_usec)" \
    'BEGIN { printf "%.2f %.2f\n", d * 1e6 / hz / c, u / c }'
}

results=$work/results
: >"$results"
echo "redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), claims per run $CLAIMS, replica $REPLICA, load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= REPS; r++)); do
  for n in $NS; do
    for mode in single batch; do
      [[ $mode == batch && $n == 1 ]] && continue
      read -r cpu cs < <(run "$mode" "$n")
      printf 'rep=%d n=%-2d %-6s cpu_%s_per_claim=%s evalsha_us_per_claim=%s\n' "$r" "$n" "$mode" "$unit" "$cpu" "$cs"
      echo "$n $mode $cpu $cs" >>"$results"
    done
  done
done
echo "medians (n mode cpu_$unit evalsha_us), load $(cut -d' ' -f1-3 /proc/loadavg):"
for n in $NS; do
  for mode in single batch; do
    [[ $mode == batch && $n == 1 ]] && continue
    awk -v n="$n" -v m="$mode" '$1 == n && $2 == m { c[++k] = $3; e[k] = $4 }
      function med(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
      END { printf "n=%-2d %-6s cpu %.2f  evalsha %.2f\n", n, m, med(c, k), med(e, k) }' "$results"
  done
done
