# deploy/k8s: rendered (kustomize_subset.py), validated offline against the Kubernetes API
# schemas (kubernetes-validate --strict), held to the rolling-restart conventions
# (k8s_conventions.py), and the gateway's Deployment, ConfigMap and Secret played with
# `podman kube play` next to the compose stack. Sourced by deploy/container/test.sh.

k8s_render() { python3 "$FG_CT_DIR/kustomize_subset.py" "$FG_ROOT/deploy/k8s/$1"; }

k8s_static_checks() {
  local dir out
  mkdir -p "$WORK/k8s"
  for dir in base overlays/small; do
    out="$WORK/k8s/$(echo "$dir" | tr / -).yaml"
    k8s_render "$dir" >"$out" || die "deploy/k8s/$dir does not render"
    # --strict refuses fields the schema does not know; the ServiceMonitor's CRD has no
    # schema offline (k8s_conventions.py checks its selector and port instead).
    kubernetes-validate --strict --quiet -k "$K8S_VERSION" "$out" >"$out.validate" 2>&1 ||
      { cat "$out.validate" >&2; die "deploy/k8s/$dir fails kubernetes-validate --strict ($K8S_VERSION)"; }
    if grep -v "Couldn't find schema for kind ServiceMonitor" "$out.validate" | grep -qi 'fail\|error'; then
      cat "$out.validate" >&2; die "deploy/k8s/$dir: kubernetes-validate reported a failure"
    fi
    python3 "$FG_CT_DIR/k8s_conventions.py" "$out" "$FG_ROOT/deploy/haproxy/haproxy.cfg" >&2 ||
      die "deploy/k8s/$dir breaks a convention"
  done
  note "deploy/k8s: base and overlays/small valid for Kubernetes $K8S_VERSION (--strict), $(grep -c '^kind:' "$WORK/k8s/overlays-small.yaml") objects in the overlay; conventions hold"
}

# A bearer token for USER signed with the Secret's token secret (HS256, aud flashgate).
k8s_token() {
  python3 - "$1" "$2" <<'PY'
import base64, hashlib, hmac, json, sys, time
secret, user = sys.argv[1].encode(), sys.argv[2]
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
body = b64(json.dumps({"sub": user, "aud": "flashgate", "exp": int(time.time()) + 600}).encode())
sig = b64(hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest())
print(f"{head}.{body}.{sig}")
PY
}

k8s_play() {
  # The base's gateway Deployment, ConfigMap and Secret with what a cluster would supply
  # instead of podman 4.3 (kube_play.py's header says what and why).
  mkdir -p "$WORK/k8s-secrets"
  python3 "$FG_CT_DIR/kube_play.py" yaml "$WORK/k8s/base.yaml" "$COMPOSE_FILE" \
    "$WORK/k8s-secrets" >"$WORK/kube.yaml"
  podman kube play --network "${FG_PROJECT}_default" "$WORK/kube.yaml" >"$WORK/kube-play.log" 2>&1 ||
    { cat "$WORK/kube-play.log" >&2; die "podman kube play failed"; }
  local c
  c=$(podman ps -a --filter "label=io.kubernetes.pod.name" --format '{{.Names}}' | grep -- '-gateway$' | head -1 || true)
  [ -n "$c" ] || c=$(podman ps -a --format '{{.Names}}' | grep '^flashgate-gateway-pod-' | head -1 || true)
  [ -n "$c" ] || { podman ps -a >&2; die "kube play started no gateway container"; }
  local ro user ip
  ro=$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$c")
  user=$(podman inspect --format '{{.Config.User}}' "$c")
  ip=$(podman inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$c")
  [ "$ro" = true ] || die "played gateway: root filesystem not read-only"
  [ -n "$ip" ] || die "played gateway: no address on ${FG_PROJECT}_default"
  # The kubelet's part: every probe of the Deployment, as it declares it, must answer 200.
  python3 "$FG_CT_DIR/kube_play.py" probes "$WORK/kube.yaml" >"$WORK/probes.txt"
  local kind port path code i
  while read -r kind port path; do
    for i in $(seq 30); do
      if [ "$path" = - ]; then
        code=$( (exec 3<>"/dev/tcp/$ip/$port") 2>/dev/null && echo 200 || echo 000)
      else
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$ip:$port$path" || true)
      fi
      [ "$code" = 200 ] && break
      sleep 1
    done
    [ "$code" = 200 ] || { podman logs --tail 20 "$c" >&2; die "played gateway: $kind GET :$port$path answers $code"; }
  done <"$WORK/probes.txt"
  local secret token answer
  secret=$(python3 "$FG_CT_DIR/kube_play.py" token-secret "$WORK/kube.yaml")
  token=$(k8s_token "$secret" k8s-play-user-1)
  answer=$(curl -s -w ' %{http_code}' --max-time 5 -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' -d '{"sku": 9, "qty": 1, "request_id": "k8s-play-1"}' \
    "http://$ip:8080/v1/claims")
  [ "${answer##* }" = 201 ] || die "played gateway: claim answered ${answer}"
  note "podman kube play (gateway Deployment + ConfigMap + Secret from deploy/k8s/base): user $user, read-only root; probes $(awk '{printf "%s %s%s; ", $1, $2, $3}' "$WORK/probes.txt")claim → ${answer##* } $(echo "${answer% *}" | head -c 80)"
  podman kube down "$WORK/kube.yaml" >/dev/null 2>&1 || true
}
