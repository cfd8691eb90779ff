# The compose stack: started in dependency order, a sale through haproxy, a rolling
# restart mid-sale. Sourced by deploy/container/test.sh.

# Debian's podman runs a container's health check only when systemd asks it to (a timer
# per container), and these machines have no systemd: this loop is that timer, running the
# compose file's own health checks every 2 s, as its `interval` says.
health_ticker() {
  while :; do
    local c
    for c in $(podman ps -q --filter "label=io.podman.compose.project=$FG_PROJECT"); do
      podman healthcheck run "$c" >/dev/null 2>&1 || true
    done
    sleep 2
  done
}

wait_healthy() {
  local c="$1" i s
  for i in $(seq 90); do
    s=$(podman inspect --format '{{.State.Health.Status}}' "$c" 2>/dev/null || echo missing)
    [ "$s" = healthy ] && return 0
    sleep 1
  done
  podman logs --tail 30 "$c" >&2 || true
  die "$c not healthy after 90 s (status: $s)"
}

compose_up() {
  # The compose file publishes these on 127.0.0.1; a local stack (deploy/local/up.sh) or
  # anything else on them would answer the test's requests instead.
  local port
  for port in 8080 8404 9090; do
    ! ss -ltnH "sport = :$port" | grep -q . || die "127.0.0.1:$port is in use; stop what listens there first"
  done
  python3 "$FG_CT_DIR/compose_order.py" "$COMPOSE_FILE" "${SKIPPED_SERVICES[@]}" >"$WORK/order.txt"
  health_ticker &
  TICKER=$!
  local wave svc cond code
  for wave in $(cut -d' ' -f1 "$WORK/order.txt" | sort -un); do
    # shellcheck disable=SC2046
    pc up -d --no-build --no-deps $(awk -v w="$wave" '$1 == w {print $2}' "$WORK/order.txt") \
      >>"$WORK/compose-up.log" 2>&1 || { tail -20 "$WORK/compose-up.log" >&2; die "podman-compose up failed"; }
    while read -r _ svc cond; do
      case "$cond" in
        healthy) wait_healthy "$(ctr "$svc")" ;;
        completed)
          code=$(podman wait "$(ctr "$svc")")
          [ "$code" = 0 ] || { podman logs "$(ctr "$svc")" >&2; die "$svc exited $code"; } ;;
        started)
          [ "$(podman inspect --format '{{.State.Running}}' "$(ctr "$svc")")" = true ] ||
            { podman logs "$(ctr "$svc")" >&2; die "$svc is not running"; } ;;
      esac
    done < <(awk -v w="$wave" '$1 == w' "$WORK/order.txt")
  done
  # The published ports, as a user on the host reaches them.
  local i
  for i in $(seq 30); do
    curl -fsS -o /dev/null http://127.0.0.1:8404/stats && break
    sleep 1
  done
  curl -fsS -o /dev/null http://127.0.0.1:8404/stats || die "haproxy's stats page is not published on 127.0.0.1:8404"
  for i in $(seq 30); do
    [ "$(haproxy_up gateway-1)$(haproxy_up gateway-2)" = 11 ] && break
    sleep 1
  done
  [ "$(haproxy_up gateway-1)$(haproxy_up gateway-2)" = 11 ] || die "haproxy does not see both gateways up"
}

# 1 when haproxy's health check has the gateway up, else 0.
haproxy_up() {
  curl -fsS http://127.0.0.1:8404/metrics 2>/dev/null |
    awk -v s="$1" '$1 ~ "^haproxy_server_status\\{proxy=\"gateways\",server=\"" s "\",state=\"UP\"" {print ($2 == 1) ? 1 : 0; f = 1} END {if (!f) print 0}'
}

# bench as the compose file's bench service: `docker compose run --rm bench run ...`.
bench() {
  pc --profile bench run --rm -v "$WORK:/out" bench run --quiet "$@"
}

# report.json's figures the test asserts, as "key value" lines.
report_figures() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
inv = r.get("invariants") or {}
# No answer, or not the gateway's (haproxy's 502/504): a connection lost. bench's own
# `errors` also counts the gateways' 429s, which one client address behind haproxy (bench
# in its container) earns from the per-client limit by design.
o = r["outcomes"]
print("lost", o.get("transport_error", 0) + o.get("timeout", 0) + o.get("other_status", 0))
print("requests", r["requests"])
print("claimed", r["outcomes"].get("claimed", 0))
print("outcomes", ",".join(f"{k}={v}" for k, v in sorted(r["outcomes"].items())))
print("invariants", "passed" if inv.get("passed") else "FAILED")
print("checks", len(inv.get("checks", [])))
for c in inv.get("checks", []):
    print("check", ("ok " if c["passed"] else "FAIL ") + c["name"] + ": " + c["detail"].replace("\n", " "))
PY
}
fig() { awk -v k="$1" '$1 == k {sub(/^[^ ]+ /, ""); print; exit}' "$2"; }

compose_sale() {
  bench --sku 7:100:4 --users 5000 --requests 20000 --out /out/sale >"$WORK/sale.txt" 2>&1 ||
    { tail -40 "$WORK/sale.txt" >&2; die "bench's sale through haproxy failed"; }
  report_figures "$WORK/sale/report.json" >"$WORK/sale.fig"
  grep '^check' "$WORK/sale.fig" >&2
  [ "$(fig invariants "$WORK/sale.fig")" = passed ] || die "sale: an invariant failed"
  [ "$(fig checks "$WORK/sale.fig")" -gt 0 ] || die "sale: bench checked no invariant (no --redis or --mysql?)"
  [ "$(fig lost "$WORK/sale.fig")" = 0 ] || die "sale: $(fig lost "$WORK/sale.fig") answers lost (transport errors, timeouts, haproxy errors)"
  [ "$(fig claimed "$WORK/sale.fig")" = 100 ] || die "sale: $(fig claimed "$WORK/sale.fig") claimed of 100 units"
  note "sale through haproxy (bench in its container, 5 000 users, 20 000 requests, 100 units):"
  note "  $(fig outcomes "$WORK/sale.fig"); 0 lost; $(fig checks "$WORK/sale.fig") invariant checks passed"
}

# Every second: epoch ms and the answers haproxy's claims frontend has given so far.
answer_sampler() {
  while :; do
    local n
    n=$(curl -fsS --max-time 1 http://127.0.0.1:8404/metrics 2>/dev/null |
      awk '$1 ~ /^haproxy_frontend_http_responses_total\{proxy="claims"/ {s += $2} END {printf "%d", s}')
    echo "$(date +%s%3N) ${n:-0}" >>"$WORK/answers.txt"
    sleep 1
  done
}
mark() { echo "$1 $(date +%s%3N)" >>"$WORK/marks.txt"; }

# stop (SIGTERM, the compose file's grace), start again, wait until serving again.
restart_service() {
  local svc="$1" c t code
  c=$(ctr "$svc")
  mark "$svc-begin"
  t=$(date +%s%N)
  podman stop -t 20 "$c" >/dev/null
  t=$((($(date +%s%N) - t) / 1000000))
  code=$(podman inspect --format '{{.State.ExitCode}}' "$c")
  if [ "$code" != 0 ]; then
    podman logs --tail 40 "$c" >"$WORK/$svc-stop.log" 2>&1 || true
    die "$svc exited $code on SIGTERM after $t ms (137: killed after the grace period; its last lines: $WORK/$svc-stop.log)"
  fi
  podman start "$c" >/dev/null
  case "$svc" in
    gateway-*)
      wait_healthy "$c"
      local i
      for i in $(seq 30); do [ "$(haproxy_up "$svc")" = 1 ] && break; sleep 0.5; done
      [ "$(haproxy_up "$svc")" = 1 ] || die "haproxy did not take $svc back" ;;
    *) sleep 3 ;;
  esac
  mark "$svc-end"
  echo "$svc $t" >>"$WORK/stops.txt"
}

rolling_restart() {
  : >"$WORK/answers.txt"
  : >"$WORK/marks.txt"
  answer_sampler &
  SAMPLER=$!
  # A sale that lasts through the three restarts: open loop, stock that does not run out.
  bench --mode open --rate 400 --connections 50 --duration 50 --sku 9:1000000:16 \
    --users 2000000 --limit 1 --repeat-ratio 0 --out /out/rolling >"$WORK/rolling.txt" 2>&1 &
  local bench_pid=$! i
  # Restart only once answers flow.
  for i in $(seq 60); do
    [ "$(awk 'END {print $2}' "$WORK/answers.txt")" -gt "$(awk 'NR == 1 {print $2}' "$WORK/answers.txt")" ] 2>/dev/null && break
    sleep 1
  done
  sleep 4
  mark steady-begin
  sleep 4
  mark steady-end
  restart_service gateway-1
  sleep 3
  restart_service gateway-2
  sleep 3
  restart_service consumer
  mark after-begin
  sleep 4
  mark after-end
  wait "$bench_pid" || { tail -40 "$WORK/rolling.txt" >&2; die "bench failed across the rolling restart"; }
  kill "$SAMPLER" 2>/dev/null; SAMPLER=""
  report_figures "$WORK/rolling/report.json" >"$WORK/rolling.fig"
  grep '^check' "$WORK/rolling.fig" >&2
  [ "$(fig invariants "$WORK/rolling.fig")" = passed ] || die "rolling restart: an invariant failed"
  [ "$(fig lost "$WORK/rolling.fig")" = 0 ] || die "rolling restart: $(fig lost "$WORK/rolling.fig") answers lost (transport errors, timeouts, haproxy errors)"
  note "rolling restart mid-sale (open loop 400 requests/s through haproxy, 50 connections):"
  note "  $(fig outcomes "$WORK/rolling.fig"); 0 lost; $(fig checks "$WORK/rolling.fig") invariant checks passed"
  python3 - "$WORK/answers.txt" "$WORK/marks.txt" "$WORK/stops.txt" <<'PY' | tee -a "$NOTES" >&2
import sys
samples = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if len(l.split()) == 2]
marks = dict((l.split()[0], int(l.split()[1])) for l in open(sys.argv[2]))
stops = dict((l.split()[0], int(l.split()[1])) for l in open(sys.argv[3]))
def rate(a, b):
    inside = [s for s in samples if a <= s[0] <= b]
    before = [s for s in samples if s[0] <= a][-1:] or inside[:1]
    after = [s for s in samples if s[0] >= b][:1] or inside[-1:]
    (t0, n0), (t1, n1) = before[0], after[0]
    return (n1 - n0) / ((t1 - t0) / 1000) if t1 > t0 else 0.0
for key, label in (("steady", "before the restarts"), ("gateway-1", "gateway-1 stop→ready"),
                   ("gateway-2", "gateway-2 stop→ready"), ("consumer", "consumer stop→start"),
                   ("after", "after the restarts")):
    a, b = marks[key + "-begin"], marks[key + "-end"]
    extra = f", SIGTERM→exit {stops[key]} ms" if key in stops else ""
    print(f"  {label}: {rate(a, b):.0f} answers/s over {(b - a) / 1000:.1f} s{extra}")
PY
}
