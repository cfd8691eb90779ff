# Prometheus (the compose file's service) scraping the stack: every target up, every alert
# rule's and dashboard panel's query returning series, and one alert firing in a drill.
# Sourced by deploy/container/test.sh.

PROM=http://127.0.0.1:9090

prometheus_queries() {
  local i up
  for i in $(seq 40); do
    up=$(curl -fsS "$PROM/api/v1/query?query=up" 2>/dev/null |
      python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(sum(1 for s in r if s["value"][1] == "1"), len(r))' || echo "0 0")
    [ "${up%% *}" = 4 ] && break
    sleep 1
  done
  [ "${up%% *}" = 4 ] || die "Prometheus: $up targets up (of 4: 2 gateways, consumer, haproxy)"
  python3 "$FG_CT_DIR/prom_queries.py" "$PROM" deploy/prometheus/alerts.yml \
    deploy/grafana/flashgate.json "$FG_CT_DIR/prometheus-expected-empty.txt" >"$WORK/queries.txt" ||
    { cat "$WORK/queries.txt" >&2; die "Prometheus: a query returned no series"; }
  note "Prometheus $(curl -fsS "$PROM/api/v1/status/buildinfo" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["version"])'): 4 targets up; $(tail -1 "$WORK/queries.txt")"
  sed 's/^/  /' "$WORK/queries.txt" | sed '$d' >>"$NOTES"
}

DRILL_T0=0
drill_start() {
  DRILL_T0=$(stamp)
  podman stop -t 20 "$(ctr gateway-2)" >/dev/null
}

drill_wait() {
  local i state=""
  for i in $(seq 120); do
    state=$(curl -fsS "$PROM/api/v1/alerts" | python3 -c 'import json,sys
a=[x for x in json.load(sys.stdin)["data"]["alerts"] if x["labels"].get("alertname")=="FlashgateTargetDown"]
print(",".join(x["state"]+":"+x["labels"].get("instance","") for x in a))' || true)
    [[ "$state" == *firing:gateway-2* ]] && break
    sleep 1
  done
  [[ "$state" == *firing:gateway-2* ]] || die "drill: FlashgateTargetDown did not fire for gateway-2 ($state)"
  note "alert drill: gateway-2 stopped → FlashgateTargetDown firing after $(elapsed "$DRILL_T0") s (rule: for 1m)"
  podman start "$(ctr gateway-2)" >/dev/null
  wait_healthy "$(ctr gateway-2)"
}
