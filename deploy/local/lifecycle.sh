#!/usr/bin/env bash
# The campaign lifecycle end to end, on a running local stack (deploy/local/demo.sh runs it
# after the main sale; by hand: export up.sh's lines first): a small campaign is created and
# preheated, sells out through the balancer with signed tokens, a stock wave
# (`consumer wave`) reopens it, it sells out again, and close-out leaves a closing report
# with drift 0 and no key of the campaign in Redis but what replays need until their TTL:
# the stored answers, the SKU metadata `fg:sku:<sku>` and its `fg:skus` membership
# (campaign-ops/src/closeout.rs). Through the gateway, the retried request still gets its first
# answer and a new one `ended`. About 20 s. Exits non-zero when a step does not hold.
# Settings (environment): FG_LIFECYCLE_SKU (2), and the FLASHGATE_* lines of up.sh.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SKU="${FG_LIFECYCLE_SKU:-2}"
STOCK=12 WAVE=5 PAY_S=4
command -v openssl >/dev/null || die "openssl is needed to sign the demo's tokens"
command -v python3 >/dev/null || die "python3 is needed to read the closing report"

cluster_flag=()
[ "$FLASHGATE_REDIS_CLUSTER" = true ] && cluster_flag=(--redis-cluster)
consumer_cli() {
  RUST_LOG="${RUST_LOG:-warn}" "$FLASHGATE_BIN/consumer" --redis "$FLASHGATE_REDIS" "${cluster_flag[@]}" \
    --shards "$FLASHGATE_SHARDS" --mysql "$FLASHGATE_MYSQL_URL" "$@"
}

# HS256 tokens as the gateways verify them (loadgen/src/token.rs mints the same): the secret
# is the file's text, the audience the gateways' default.
secret="$(tr -d ' \t\r\n' <"$FLASHGATE_TOKEN_SECRET_FILE")"
b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
token() {
  local h p s
  h="$(printf '{"alg":"HS256","typ":"JWT"}' | b64url)"
  p="$(printf '{"sub":"%s","aud":"flashgate","exp":%s}' "$1" "$(($(date +%s) + 3600))" | b64url)"
  s="$(printf '%s.%s' "$h" "$p" | openssl dgst -sha256 -hmac "$secret" -binary | b64url)"
  printf '%s.%s.%s' "$h" "$p" "$s"
}

# claim USER REQUEST_ID → prints "<status> <claim_id or ->"
claim() {
  local body
  body="$(curl -s --max-time 5 -H "Authorization: Bearer $(token "$1")" \
    -H 'Content-Type: application/json' \
    -d "{\"sku\":$SKU,\"request_id\":\"$2\"}" "$FLASHGATE_URL/v1/claims")" || body=''
  local status id
  status="$(printf '%s' "$body" | sed -n 's/.*"status":"\([a-z_]*\)".*/\1/p')"
  id="$(printf '%s' "$body" | sed -n 's/.*"claim_id":"\([^"]*\)".*/\1/p')"
  printf '%s %s\n' "${status:-no_answer}" "${id:--}"
}

# Confirms a claim through the consumer's admin API once the ledger has it, so the payment
# timeout releases nothing and the counts below stay exact.
confirm() {
  for _ in $(seq 100); do
    curl -sf --max-time 5 -X POST -H "Authorization: Bearer $FLASHGATE_ADMIN_TOKEN" \
      "$FLASHGATE_CONSUMER_ADMIN/v1/claims/$1/confirm" >/dev/null && return 0
    sleep 0.1
  done
  die "claim $1 never reached the ledger"
}

# sell PREFIX → claims as new users until one answers sold_out; prints how many claimed
# and the first user that got a unit. Gateways learn of a new or restocked SKU by Pub/Sub:
# unknown_sku and sold_out answers before the first unit are retried (as new users) for a
# few seconds.
sell() {
  local n=0 tries=0 out user first=''
  while :; do
    user="$1$((n + tries))"
    out="$(claim "$user" "r-$user")"
    case "${out%% *}" in
      claimed) n=$((n + 1)); first="${first:-$user}"; confirm "${out#* }" ;;
      sold_out) [ "$n" -gt 0 ] || [ "$tries" -ge 30 ] && break; tries=$((tries + 1)); sleep 0.1 ;;
      unknown_sku) [ "$tries" -lt 30 ] || die "sku $SKU unknown to the gateway"; tries=$((tries + 1)); sleep 0.1 ;;
      *) die "claim answered ${out%% *}" ;;
    esac
    [ "$n" -le $((STOCK + WAVE)) ] || die "sold more than the stock"
  done
  echo "$n ${first:--}"
}

say "lifecycle: campaign $SKU ($STOCK units, sale ends in 10 s, payment timeout $PAY_S s)"
consumer_cli campaign --sku "$SKU" --stock "$STOCK" --width 4 --limit 1 \
  --start now --end now+10s --payment-timeout-s "$PAY_S" >/dev/null
consumer_cli preheat "$SKU" >/dev/null

read -r first user <<<"$(sell a)"
[ "$first" -eq "$STOCK" ] || die "first sale: $first claimed, want $STOCK"
say "lifecycle: sold out after $first claims"
replay="$(claim "$user" "r-$user")"
[ "${replay%% *}" = claimed ] || die "a retried request got ${replay%% *}, not its first answer"

consumer_cli wave "$SKU" "$WAVE" --id demo-reopen >/dev/null
read -r second _ <<<"$(sell b)"
[ "$second" -eq "$WAVE" ] || die "after the wave: $second claimed, want $WAVE"
say "lifecycle: wave demo-reopen reopened it; sold out again after $second more"

say "lifecycle: waiting for the end and the payment timeout, then closing"
report=''
for _ in $(seq 60); do
  report="$(consumer_cli close "$SKU" 2>/dev/null)" && break
  report=''
  sleep 0.5
done
[ -n "$report" ] || die "close-out of sku $SKU did not finish (see consumer close $SKU)"
printf '%s' "$report" | python3 -c '
import json, sys
life = json.load(sys.stdin)
r = life["closing_report"]
want = int(sys.argv[1])
assert life["closed_ms"], "not closed"
assert r["drift"] == 0 and not r["missing_slices"], "closing report: %r" % r
assert r["active_ledger"] == want, "closing report sold %s, want %s" % (r["active_ledger"], want)
print("flashgate: lifecycle: closing report: stock %s, sold %s, drift %s" % (r["stock"], r["active_ledger"], r["drift"]), file=sys.stderr)
' "$((STOCK + WAVE))" || die "closing report of sku $SKU is wrong"

# Invariant `replay` after close-out: the retried request gets its first answer, a new
# one is refused.
again="$(claim "$user" "r-$user")"
[ "$again" = "$replay" ] || die "after close-out a retried request got '$again', not '$replay'"
fresh="$(claim "after-close" "r-after-close")"
[ "${fresh%% *}" = ended ] || die "after close-out a new claim got ${fresh%% *}, not ended"
say "lifecycle: after close-out a retry is replayed ($again), a new claim is ended"

# No key of the campaign is left on any Redis node but what replays need: the stored
# answers, and the metadata and live-set membership the gateways find them by (the
# consumer removes those two once the answers expired).
left=0 answers=0 meta=0 member=0
IFS=, read -r -a urls <<<"$FLASHGATE_REDIS"
for url in "${urls[@]}"; do
  url="redis://${url#redis://}"
  while read -r key; do
    # A campaign key ends in `:<sku>` (`{T}:stock:<sku>`, `fg:sku:<sku>`, ...); a stored
    # answer is `{T}:req:<sku>:…`. The shard tag `{fg:<s>:<n>}` is left out of the match.
    case "${key#*\}}" in
      ":req:$SKU:"*) answers=$((answers + 1)) ;;
      "fg:sku:$SKU") meta=$((meta + 1)) ;;
      *":$SKU") say "left behind: $key"; left=$((left + 1)) ;;
    esac
  done < <(redis-cli -u "$url" --scan)
  if [ "$(redis-cli -u "$url" sismember fg:skus "$SKU" 2>/dev/null)" = 1 ]; then
    member=$((member + 1))
  fi
done
[ "$left" -eq 0 ] || die "close-out left $left key(s) of sku $SKU"
[ "$answers" -gt 0 ] || die "close-out removed the stored replay answers"
[ "$meta" -ge 1 ] && [ "$member" -ge 1 ] ||
  die "close-out removed the metadata of sku $SKU while its replay answers are kept"
say "lifecycle passed: no other campaign key left in Redis ($answers replay answers, the metadata and fg:skus membership kept until their TTL)"
