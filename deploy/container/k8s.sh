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
  # The base's gateway Deployment, ConfigMap and Secret as they are, but for what a
  # cluster would supply: the Redis seed nodes are the compose stack's, one replica (podman
  # plays a Deployment as one pod), the image is the one built above, and host ports
  # that do not collide with the compose stack's (see below). Debian's podman
  # 4.3 panics on a `secret` volume (kube.VolumeFromSecret is handed no secrets manager),
  # so the test does the kubelet's part: it writes the Secret's items as files, owned by
  # the pod's fsGroup with the volume's defaultMode, and mounts that folder (hostPath) where
  # the secret volume would be. The Secret is still played, and the files are its data.
  mkdir -p "$WORK/k8s-secrets"
  python3 - "$WORK/k8s/base.yaml" "$COMPOSE_FILE" "$WORK/k8s-secrets" >"$WORK/kube.yaml" <<'PY'
import base64, os, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
compose = yaml.safe_load(open(sys.argv[2]))
out = sys.argv[3]
redis = compose["x-flashgate-env"]["FLASHGATE_REDIS"]
secrets = {}
for d in docs:
    if d["kind"] == "Secret":
        data = {k: base64.b64decode(v) for k, v in d.get("data", {}).items()}
        data.update({k: v.encode() for k, v in d.get("stringData", {}).items()})
        secrets[d["metadata"]["name"]] = data
keep = []
for d in docs:
    if d["kind"] == "ConfigMap":
        d["data"]["FLASHGATE_REDIS"] = redis
        keep.append(d)
    elif d["kind"] == "Secret":
        keep.append(d)
    elif d["kind"] == "Deployment" and d["metadata"]["name"] == "flashgate-gateway":
        d["spec"]["replicas"] = 1
        pod = d["spec"]["template"]["spec"]
        pod["containers"][0]["image"] = "localhost/flashgate:local"
        # podman 4.3 publishes every containerPort on the host (the same port when no
        # hostPort is given), where haproxy already holds 8080: loopback, 10000 above.
        for port in pod["containers"][0].get("ports", []):
            port["hostPort"] = port["containerPort"] + 10000
            port["hostIP"] = "127.0.0.1"
        group = pod.get("securityContext", {}).get("fsGroup")
        for v in pod.get("volumes", []):
            src = v.pop("secret", None)
            if src is None:
                continue
            folder = os.path.join(out, v["name"])
            os.makedirs(folder, mode=0o755)
            data = secrets[src["secretName"]]
            items = src.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                path = os.path.join(folder, item["path"])
                with open(path, "wb") as f:
                    f.write(data[item["key"]])
                if group is not None:
                    os.chown(path, 0, group)
                os.chmod(path, item.get("mode", src.get("defaultMode", 0o644)))
            v["hostPath"] = {"path": folder, "type": "Directory"}
        keep.append(d)
yaml.safe_dump_all(keep, sys.stdout, sort_keys=False)
PY
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
  python3 - "$WORK/kube.yaml" >"$WORK/probes.txt" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "Deployment":
        c = d["spec"]["template"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            p = c.get(kind) or {}
            if "httpGet" in p:
                port = p["httpGet"]["port"]
                print(kind, ports.get(port, port), p["httpGet"]["path"])
            elif "tcpSocket" in p:
                port = p["tcpSocket"]["port"]
                print(kind, ports.get(port, port), "-")
PY
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
  secret=$(python3 -c 'import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "Secret": print(d["stringData"]["token-secret"])' "$WORK/kube.yaml")
  token=$(k8s_token "$secret" k8s-play-user-1)
  answer=$(curl -s -w ' %{http_code}' --max-time 5 -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' -d '{"sku": 9, "qty": 1, "request_id": "k8s-play-1"}' \
    "http://$ip:8080/v1/claims")
  [ "${answer##* }" = 201 ] || die "played gateway: claim answered ${answer}"
  note "podman kube play (gateway Deployment + ConfigMap + Secret from deploy/k8s/base): user $user, read-only root; probes $(awk '{printf "%s %s%s; ", $1, $2, $3}' "$WORK/probes.txt")claim → ${answer##* } $(echo "${answer% *}" | head -c 80)"
  podman kube down "$WORK/kube.yaml" >/dev/null 2>&1 || true
}
