#!/usr/bin/env bash
# User-space instructions per answer of the gateway, counted with callgrind: the one
# figure on this shared machine that does not move with the neighbours' load (this VM has
# no hardware counters, so `perf stat -e instructions` is not available). It is how the
# small before/after pairs of docs/BENCHMARKS.md are taken.
#
#   bench/external/instructions.sh [sold-out|claims] [gateway binary]...
#   RUNS=2 bench/external/instructions.sh claims /tmp/before/gateway target/release/gateway
#
# For each gateway binary (default target/release/gateway), RUNS times (default 1): our
# harness drives a stack whose gateway runs under valgrind (`--gateway-bin` pointing at a
# wrapper), with 10 connections and no per-user rate; once answers flow, a WINDOW_S-second
# window (default 6) is framed by `callgrind_control -z` / `-d`. Printed per run: answers
# in the window (from `parse_body`'s call count), the whole process's instructions per
# answer, and the connection tasks' inclusive count per answer (background tasks, which
# blur the whole-process figure by ~0.1k, left out). Installs valgrind when missing.
# CLIENT=wrk frames the window in the wrk phase of `bench run --external --wrk-threads 1`
# instead (the same requests from an external client; installs wrk when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."

row="${1:-sold-out}"
shift || true
case "$row" in
  sold-out) sku="1:1:1" ;;
  claims) sku="1:10000000:16" ;;
  *) echo "$0: unknown row $row (sold-out, claims)" >&2; exit 2 ;;
esac
bins=("$@")
[ ${#bins[@]} -eq 0 ] && bins=(target/release/gateway)
RUNS="${RUNS:-1}"
WINDOW_S="${WINDOW_S:-6}"
BENCH="${BENCH:-target/release/bench}"
[ -x "$BENCH" ] || cargo build --release -q -p bench -p gateway -p campaign-ops
if ! command -v valgrind >/dev/null || ! command -v callgrind_control >/dev/null; then
  echo "installing valgrind ..." >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get install -y valgrind >/dev/null
fi
CLIENT="${CLIENT:-bench}"
external=()
case "$CLIENT" in
  bench) ;;
  wrk)
    external=(--external --wrk-threads 1)
    if ! command -v wrk >/dev/null; then
      echo "installing wrk ..." >&2
      SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
      $SUDO apt-get install -y wrk >/dev/null
    fi
    ;;
  *) echo "$0: CLIENT must be bench or wrk, not $CLIENT" >&2; exit 2 ;;
esac
work="$(mktemp -d /tmp/flashgate-instructions.XXXXXX)"
RUN_PID=""
trap '[ -n "$RUN_PID" ] && kill -TERM -- "-$RUN_PID" 2>/dev/null; true' EXIT

measure() {
  local bin tag wrap pid admin n0 dump
  bin="$(realpath "$1")" tag="$2"
  wrap="$work/$tag.sh"
  printf '#!/usr/bin/env bash\nexec valgrind --tool=callgrind --callgrind-out-file=%s/%s.%%p %s "$@"\n' \
    "$work" "$tag" "$bin" >"$wrap"
  chmod +x "$wrap"
  # Its own process group, so that an early exit takes the stack it started with it.
  setsid "$BENCH" run --stack --quiet --no-consumer --sku "$sku" --users 4000000 --limit 1 \
    --repeat-ratio 0 --connections 10 --duration $((WINDOW_S + 12)) \
    --gateway-arg=--user-rate=0 --gateway-bin "$wrap" --out "$work/$tag-run" "${external[@]}" \
    >"$work/$tag.log" 2>&1 &
  RUN_PID=$!
  pid="" admin=""
  for _ in $(seq 1 600); do
    pid="$(pgrep -f "callgrind-out-file=$work/$tag\." | head -1 || true)"
    [ -n "$pid" ] && admin="$(tr '\0' ' ' </proc/"$pid"/cmdline | grep -o -- '--admin-listen [^ ]*' | cut -d' ' -f2 || true)"
    [ -n "$admin" ] && break
    sleep 0.2
  done
  [ -n "$admin" ] || { echo "$0: the gateway under valgrind did not start ($work/$tag.log)" >&2; return 1; }
  answered() { curl -s "http://$admin/metrics" | awk '/^flashgate_requests_total/ && /route="claims"/ {s+=$2} END {printf "%d", s}'; }
  for _ in $(seq 1 300); do
    n0="$(answered || true)"
    [ "${n0:-0}" -gt 200 ] && break
    sleep 0.5
  done
  if [ "$CLIENT" = wrk ]; then
    # Our own load first, then wrk's for as long: wait for wrk's phase.
    for _ in $(seq 1 600); do
      grep -q "^external: wrk" "$work/$tag.log" && break
      sleep 0.2
    done
  fi
  sleep 3
  callgrind_control -z "$pid" >/dev/null 2>&1
  sleep "$WINDOW_S"
  callgrind_control -d "$pid" >/dev/null 2>&1
  sleep 1
  dump="$(ls "$work/$tag.$pid".* | head -1)"
  callgrind_annotate --inclusive=yes --auto=yes "$dump" 2>/dev/null >"$dump.txt"
  python3 - "$dump.txt" "$bin" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
num = lambda s: int(s.replace(",", ""))
total = num(re.search(r"^\s*([\d,]+)\s+\(100\.0%\)\s+PROGRAM TOTALS", text, re.M).group(1))
calls = num(re.search(r"=> \S*gateway::api::input::parse_body \(([\d,]+)x\)", text).group(1))
conn = num(re.search(r"^\s*([\d,]+) .*plumbing/src/serve\.rs:plumbing::serve::serve::\{\{closure\}\}::\{\{closure\}\} \[", text, re.M).group(1))
print(f"| {sys.argv[2]} | {calls} | {total / calls / 1e3:.2f}k | {conn / calls / 1e3:.2f}k |")
PY
  wait "$RUN_PID" || true
  RUN_PID=""
}

echo "| gateway | answers in the window | instructions per answer, whole process | connection tasks |"
echo "| --- | ---: | ---: | ---: |"
i=0
for run in $(seq 1 "$RUNS"); do
  for bin in "${bins[@]}"; do
    i=$((i + 1))
    measure "$bin" "g$i-r$run"
  done
done
echo "dumps: $work" >&2
