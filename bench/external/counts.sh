#!/usr/bin/env bash
# The gateway beside its floors, counted instead of timed: user-space instructions per
# answer (callgrind, whole process), system calls per answer (`strace -c -f -p`) and
# context switches per answer (/proc/<pid>/task/*/status), for
#
#   - the gateway answering sold out (410, from its local cache) and claiming (201, no
#     consumer), with the body's `user` as identity (`--insecure-body-user`), so that it
#     does the work the floors do: read a JSON body, answer (and for a claim, one Redis
#     round trip);
#   - the same gateway and requests with a bearer token per request (HS256): the token's
#     cost, beside the body-user figures;
#   - the floors of bench/src/stack/baseline.rs (`bench serve-baseline`): bare hyper, and
#     hyper + one redis-rs EVALSHA against a private redis-server. They get the very
#     requests of the body-user rows (same body, no Authorization header).
#
#   bench/external/counts.sh                 # one pass, prints a Markdown table
#   PASSES=2 PAUSE_S=120 bench/external/counts.sh   # cells "pass 1 / pass 2"
#
# Every client is wrk -t1 with bench/external/claims.lua. Each figure is one wrk run of
# WINDOW_S seconds (default 6): the counter is read (or zeroed) before wrk starts and read
# after it ends, and divided by the answers wrk completed, so the window holds every
# answer counted (plus a few idle wake-ups). Instructions: 10 connections, after a
# WARM_S-second (default 3) warm-up wrk, between `callgrind_control -z` and `-d`. System
# calls and switches: at 1 and at 10 connections, switches in one run and strace in a
# second (strace slows the process and would add switches). Each claim run uses a fresh
# SKU (10 000 000 units, 16 shards) so that no user meets its limit; the sold-out runs
# share SKU 1 (1 unit). Processes run under `nice -n 19` (a count does not depend on it).
#
# Needs a release build (`cargo build --release -p gateway -p bench`; BIN_DIR, default
# $CARGO_TARGET_DIR/release or target/release), valgrind, strace, wrk, redis-server,
# python3, curl. Every wait is bounded and every process started here is stopped on exit.
# Raw results, wrk outputs, strace summaries and callgrind dumps (p<pass>-<row>.*) stay in the printed
# directory (`callgrind_annotate --inclusive=yes <dump>` shows where they go).
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN_DIR="${BIN_DIR:-${CARGO_TARGET_DIR:-target}/release}"
BENCH="$BIN_DIR/bench"
GATEWAY="$BIN_DIR/gateway"
PASSES="${PASSES:-1}"
PAUSE_S="${PAUSE_S:-120}"
WINDOW_S="${WINDOW_S:-6}"
WARM_S="${WARM_S:-3}"
TOKENS="${TOKENS:-200000}"
LUA="bench/external/claims.lua"
for t in valgrind callgrind_control strace wrk redis-server python3 curl; do
  command -v "$t" >/dev/null || { echo "$0: needs $t" >&2; exit 2; }
done
for b in "$BENCH" "$GATEWAY"; do
  [ -x "$b" ] || { echo "$0: no $b (cargo build --release -p gateway -p bench)" >&2; exit 2; }
done
BENCH="$(realpath "$BENCH")" GATEWAY="$(realpath "$GATEWAY")"
work="$(mktemp -d /tmp/flashgate-counts.XXXXXX)"
results="$work/results.tsv"
: >"$results"
NICE=(nice -n 19)

# Process groups (bench stack stops its gateway and Redis itself on SIGTERM), free ports
# and bounded waits.
# shellcheck source=bench/external/procs.sh
source bench/external/procs.sh
record() { printf '%s\t%s\t%s\n' "$PASS" "$1" "$2" >>"$results"; }

# `user Bearer <token>` lines for claims.lua, HS256 with the stack's secret, the claims
# loadgen/src/token.rs mints (sub, aud "flashgate", exp).
mint_tokens() {
  python3 - "$1" "$TOKENS" "$2" >"$3" <<'PY'
import base64, hashlib, hmac, json, sys, time
secret = open(sys.argv[1], "rb").read().strip()
n, tag = int(sys.argv[2]), sys.argv[3]
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=")
head = b64(json.dumps({"typ": "JWT", "alg": "HS256"}, separators=(",", ":")).encode())
exp = int(time.time()) + 6 * 3600
out = []
for i in range(n):
    user = f"{tag}x{i}"
    body = b64(json.dumps({"sub": user, "aud": "flashgate", "exp": exp}, separators=(",", ":")).encode())
    signing = head + b"." + body
    sig = b64(hmac.new(secret, signing, hashlib.sha256).digest())
    out.append(f"{user} Bearer {(signing + b'.' + sig).decode()}")
sys.stdout.write("\n".join(out) + "\n")
PY
}

# One wrk run: wrk_run <out> <url> <connections> <seconds> <sku> [tokens]. Prints the
# answers it completed; fails when fewer than 99 % of them have the expected status.
RUN_N=0
wrk_run() {
  local out="$1" url="$2" c="$3" secs="$4" sku="$5" tokens="${6:-}" expect="$EXPECT"
  RUN_N=$((RUN_N + 1))
  local extra=()
  [ -n "$tokens" ] && extra=("$tokens" 1)
  "${NICE[@]}" timeout -k 5 $((secs + 30)) wrk -t1 "-c$c" "-d${secs}s" --timeout 5s -s "$LUA" \
    "$url/v1/claims" -- "p${PASS}r${RUN_N}-" "$sku" "${extra[@]}" >"$out" 2>&1 || true
  python3 - "$out" "$expect" <<'PY'
import json, sys
line = next((l for l in open(sys.argv[1]) if l.startswith("FGJSON ")), None)
if line is None:
    sys.exit(f"no FGJSON line in {sys.argv[1]}")
s = json.loads(line[7:])
n, ok = s["requests"], s["statuses"].get(sys.argv[2], 0)
if n == 0 or ok < 0.99 * n or s["socket_errors"] > 0:
    sys.exit(f"{sys.argv[1]}: {n} answers, {ok} with status {sys.argv[2]}, statuses {s['statuses']}, socket errors {s['socket_errors']}")
print(n)
PY
}

# Instructions per answer of the process `pid` running under callgrind (out files
# $cgout.<pid>.N): callgrind_measure <key> <pid> <cgout> <url> <sku-warm> <sku> [tokens]
callgrind_measure() {
  local key="$1" pid="$2" cgout="$3" url="$4" skuw="$5" sku="$6" tokens="${7:-}" n dump total
  wrk_run "$work/p$PASS-$key.warm.wrk" "$url" 10 "$WARM_S" "$skuw" "$tokens" >/dev/null
  timeout 30 callgrind_control -z "$pid" >/dev/null 2>&1
  n="$(wrk_run "$work/p$PASS-$key.wrk" "$url" 10 "$WINDOW_S" "$sku" "$tokens")"
  timeout 30 callgrind_control -d "$pid" >/dev/null 2>&1
  dump=""
  for _ in $(seq 1 50); do
    dump="$(ls -t "$cgout.$pid".* 2>/dev/null | head -1 || true)"
    [ -n "$dump" ] && grep -q '^totals:' "$dump" && break
    sleep 0.2
  done
  total="$(awk '/^totals:/ {print $2}' "$dump")"
  mv "$dump" "$work/p$PASS-$key.callgrind"
  record "$key.instructions" "$(python3 -c "print(f'{$total / $n / 1e3:.2f}')")"
  record "$key.instructions.answers" "$n"
}

switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {s += $2} END {print s}'; }

# System calls and switches per answer of `pid`: sys_measure <key> <pid> <url> <conns> <sku1> <sku2> [tokens]
sys_measure() {
  local key="$1" pid="$2" url="$3" c="$4" sku1="$5" sku2="$6" tokens="${7:-}" s0 s1 n spid calls
  s0="$(switches "$pid")"
  n="$(wrk_run "$work/p$PASS-$key.c$c.sw.wrk" "$url" "$c" "$WINDOW_S" "$sku1" "$tokens")"
  s1="$(switches "$pid")"
  record "$key.switches.c$c" "$(python3 -c "print(f'{($s1 - $s0) / $n:.2f}')")"
  "${NICE[@]}" strace -c -f -q -p "$pid" -o "$work/p$PASS-$key.c$c.strace" 2>"$work/p$PASS-$key.c$c.strace.err" &
  spid=$!
  sleep 1.5
  n="$(wrk_run "$work/p$PASS-$key.c$c.st.wrk" "$url" "$c" "$WINDOW_S" "$sku2" "$tokens")"
  kill -INT "$spid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$spid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  calls="$(awk '$NF == "total" {print $4}' "$work/p$PASS-$key.c$c.strace")"
  [ -n "$calls" ] || { echo "$0: no strace summary in $work/$key.c$c.strace" >&2; return 1; }
  record "$key.syscalls.c$c" "$(python3 -c "print(f'{$calls / $n:.2f}')")"
  record "$key.syscalls.c$c.answers" "$n"
}

# A stack (Redis + one gateway, no consumer), its gateway started through `gw` (the
# binary, or a wrapper that runs it under valgrind); sets STACK_* and preheats the SKUs.
start_stack() {
  local tag="$1" gw="$2" line
  setsid "${NICE[@]}" "$BENCH" stack --no-consumer --gateway-bin "$gw" \
    --gateway-arg=--user-rate=0 --gateway-arg=--insecure-body-user \
    >"$work/$tag.stack" 2>&1 </dev/null &
  STACK_PID=$!
  groups+=("$STACK_PID")
  wait_for "bench stack ($tag)" 120 grep -q '^gateway 0: ' "$work/$tag.stack"
  line="$(grep '^gateway 0: ' "$work/$tag.stack")"
  STACK_URL="$(echo "$line" | awk '{print $3}')"
  STACK_REDIS="redis://$(awk '/^redis: / {print $2}' "$work/$tag.stack")"
  STACK_GW_PID="$(pgrep -P "$STACK_PID" -f -- "--listen ${STACK_URL#http://}" | head -1)"
  [ -n "$STACK_GW_PID" ] || { echo "$0: no gateway process under bench stack $STACK_PID" >&2; return 1; }
  STACK_SECRET="$(tr '\0' '\n' </proc/"$STACK_GW_PID"/cmdline | grep -A1 -x -- --token-secret-file | tail -1)"
  local skus=(--sku 1:1:1)
  for i in $(seq 101 112); do skus+=(--sku "$i:10000000:16"); done
  timeout -k 5 120 "${NICE[@]}" "$BENCH" run --quiet --target "$STACK_URL" --redis "$STACK_REDIS" \
    --token-secret-file "$STACK_SECRET" "${skus[@]}" --users 100000 --limit 1 --repeat-ratio 0 \
    --connections 4 --duration 2 >"$work/$tag.preheat" 2>&1 ||
    echo "warning: the preheating run failed ($work/$tag.preheat)" >&2
}

# The gateway's rows on a stack started by start_stack: sold out, claim; body user, token.
gateway_rows() {
  local how="$1" sku=100 mode tokens
  for mode in body token; do
    tokens=""
    [ "$mode" = token ] && tokens="$TOKFILE"
    EXPECT=410
    if [ "$how" = callgrind ]; then
      callgrind_measure "gw-$mode-soldout" "$STACK_GW_PID" "$work/gw" "$STACK_URL" 1 1 "$tokens"
    else
      for c in 1 10; do sys_measure "gw-$mode-soldout" "$STACK_GW_PID" "$STACK_URL" "$c" 1 1 "$tokens"; done
    fi
    EXPECT=201
    if [ "$how" = callgrind ]; then
      callgrind_measure "gw-$mode-claim" "$STACK_GW_PID" "$work/gw" "$STACK_URL" $((sku + 1)) $((sku + 2)) "$tokens"
      sku=$((sku + 2))
    else
      for c in 1 10; do
        sys_measure "gw-$mode-claim" "$STACK_GW_PID" "$STACK_URL" "$c" $((sku + 1)) $((sku + 2)) "$tokens"
        sku=$((sku + 2))
      done
    fi
  done
}

# A floor (`bench serve-baseline`), under valgrind with `how` = callgrind; sets FLOOR_*.
start_floor() {
  local kind="$1" how="$2" port args
  port="$(free_port)"
  args=(serve-baseline --listen "127.0.0.1:$port")
  [ "$kind" = redis ] && args+=(--redis-url "$FLOOR_REDIS")
  if [ "$how" = callgrind ]; then
    setsid "${NICE[@]}" valgrind --tool=callgrind --callgrind-out-file="$work/floor-$kind.%p" \
      "$BENCH" "${args[@]}" >"$work/floor-$kind.log" 2>&1 </dev/null &
  else
    setsid "${NICE[@]}" "$BENCH" "${args[@]}" >"$work/floor-$kind.log" 2>&1 </dev/null &
  fi
  FLOOR_PID=$!
  groups+=("$FLOOR_PID")
  FLOOR_URL="http://127.0.0.1:$port"
  wait_for "floor $kind" 60 listening "$port"
}

floor_rows() {
  local how="$1" kind key
  for kind in bare redis; do
    start_floor "$kind" "$how"
    key="floor-$kind"
    if [ "$kind" = bare ]; then EXPECT=200; else EXPECT=201; fi
    if [ "$how" = callgrind ]; then
      callgrind_measure "$key" "$FLOOR_PID" "$work/floor-$kind" "$FLOOR_URL" 101 102
    else
      for c in 1 10; do sys_measure "$key" "$FLOOR_PID" "$FLOOR_URL" "$c" 101 102; done
    fi
    stop "$FLOOR_PID"
  done
}

one_pass() {
  local wrap="$work/gateway-callgrind.sh" rport
  printf '#!/usr/bin/env bash\nexec valgrind --tool=callgrind --callgrind-out-file=%s/gw.%%p %s "$@"\n' \
    "$work" "$GATEWAY" >"$wrap"
  chmod +x "$wrap"
  echo "pass $PASS: gateway under callgrind ..." >&2
  start_stack "p$PASS-cg" "$wrap"
  TOKFILE="$work/tokens"
  mint_tokens "$STACK_SECRET" "p$PASS-" "$TOKFILE"
  gateway_rows callgrind
  stop "$STACK_PID"
  echo "pass $PASS: gateway, system calls and switches ..." >&2
  start_stack "p$PASS-sys" "$GATEWAY"
  mint_tokens "$STACK_SECRET" "p$PASS-" "$TOKFILE"
  gateway_rows sys
  stop "$STACK_PID"
  echo "pass $PASS: floors ..." >&2
  rport="$(free_port)"
  setsid "${NICE[@]}" redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
    >"$work/floor-redis-server.log" 2>&1 </dev/null &
  REDIS_PID=$!
  groups+=("$REDIS_PID")
  FLOOR_REDIS="redis://127.0.0.1:$rport"
  wait_for "redis-server" 20 listening "$rport"
  floor_rows callgrind
  floor_rows sys
  stop "$REDIS_PID"
}

for PASS in $(seq 1 "$PASSES"); do
  [ "$PASS" -gt 1 ] && sleep "$PAUSE_S"
  one_pass
done

python3 - "$results" "$PASSES" <<'PY'
import collections, sys
v = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    p, k, x = line.rstrip("\n").split("\t")
    v[k][int(p)] = float(x)
passes = range(1, int(sys.argv[2]) + 1)
def cell(k, unit=""):
    return " / ".join(f"{v[k][p]:.2f}{unit}" if p in v[k] else "–" for p in passes)
def ratio(a, b, goal_diff=False, unit=""):
    out = []
    for p in passes:
        if p not in v[a] or p not in v[b]:
            out.append("–")
        elif goal_diff:
            out.append(f"{v[a][p] / v[b][p]:.2f}× ({v[a][p] - v[b][p]:+.2f}{unit})")
        else:
            out.append(f"{v[a][p] / v[b][p]:.2f}×")
    return " / ".join(out)
rows = [("user-space instructions, 10 connections", "instructions", "k")]
for m in ("syscalls", "switches"):
    for c in (1, 10):
        rows.append((f"{'system calls' if m == 'syscalls' else 'context switches'}, {c} connection{'s' if c > 1 else ''}", f"{m}.c{c}", ""))
print("| per answer | gateway sold-out (410) | bare hyper | ratio | gateway claim (201) | hyper + redis-rs | ratio (difference) |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for name, m, unit in rows:
    so, bare, cl, rr = (f"{s}.{m}" for s in ("gw-body-soldout", "floor-bare", "gw-body-claim", "floor-redis"))
    print(f"| {name} | {cell(so, unit)} | {cell(bare, unit)} | **{ratio(so, bare)}** | {cell(cl, unit)} | {cell(rr, unit)} | **{ratio(cl, rr, True, unit)}** |")
print()
print("| per answer, gateway | sold-out, body user | sold-out, token | token's cost | claim, body user | claim, token | token's cost |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
def diff(a, b, unit):
    return " / ".join(f"{v[a][p] - v[b][p]:+.2f}{unit}" if p in v[a] and p in v[b] else "–" for p in passes)
for name, m, unit in rows:
    sb, st, cb, ct = (f"gw-{i}.{m}" for i in ("body-soldout", "token-soldout", "body-claim", "token-claim"))
    print(f"| {name} | {cell(sb, unit)} | {cell(st, unit)} | {diff(st, sb, unit)} | {cell(cb, unit)} | {cell(ct, unit)} | {diff(ct, cb, unit)} |")
PY
echo "raw results, wrk outputs, strace summaries, callgrind dumps: $work" >&2
