#!/usr/bin/env bash
# Validates the deploy files without a Docker engine: Prometheus config and alert rules
# (promtool, with unit tests), the haproxy config (the real haproxy binary), the compose
# file (YAML, references between services, mounted paths, the Dockerfile's packages, safe
# defaults; `docker compose config` too where the Compose plugin is installed: Debian's
# apt has no Compose v2 plugin, so it usually is not), the declared minimum Rust version
# against Cargo.toml, the Dockerfile and every locked dependency (offline), the
# Grafana provisioning and dashboard (JSON, every query parsed by promtool), and that the
# metric names the rules and the dashboard use are the ones the code exports.
#
# Installs what is missing, idempotently: haproxy and PyYAML with apt-get; promtool is
# taken out of Debian's `prometheus` package with `apt-get download` rather than installed,
# so no Prometheus service gets started on :9090. Prints one line per check and exits
# non-zero when any check fails.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPLOY="$ROOT/deploy"
TOOLS="${FG_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flashgate/tools}"
# Metric names the rules or the dashboard use before the code exports them (kept empty once
# every name is exported). A name listed here is reported, not failed.
PENDING_METRICS=""

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
FAILED=0

say() { printf 'check: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    return 1
  fi
}

apt_updated=0
apt_update() {
  [ "$apt_updated" = 1 ] && return 0
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || return 1
  apt_updated=1
}

apt_install() {
  command -v apt-get >/dev/null || die "$1 is missing and there is no apt-get: install $1 by hand"
  say "installing $* with apt-get"
  { apt_update &&
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
      >/dev/null 2>&1; } || die "apt-get install $* failed (need root or sudo); install $* by hand"
}

# promtool: on PATH, else the copy cached from an earlier run, else extracted from the
# Debian package.
ensure_promtool() {
  if command -v promtool >/dev/null; then PROMTOOL=promtool; return; fi
  PROMTOOL="$TOOLS/promtool"
  [ -x "$PROMTOOL" ] && return
  command -v apt-get >/dev/null || die "promtool is missing and there is no apt-get: install Prometheus' promtool by hand"
  say "fetching promtool from the Debian package prometheus"
  mkdir -p "$TOOLS" "$WORK/deb"
  if ! (cd "$WORK/deb" && apt-get download prometheus >/dev/null 2>&1); then
    apt_update || die "apt-get update failed (need root or sudo); install the package prometheus by hand"
    (cd "$WORK/deb" && apt-get download prometheus >/dev/null 2>&1) ||
      die "apt-get download prometheus failed; install the package prometheus by hand"
  fi
  dpkg-deb -x "$WORK"/deb/prometheus_*.deb "$WORK/deb/x" &&
    install -m 0755 "$WORK/deb/x/usr/bin/promtool" "$PROMTOOL" ||
    die "could not extract promtool from the prometheus package"
}

ensure_haproxy() {
  if command -v haproxy >/dev/null; then HAPROXY=haproxy
  elif [ -x /usr/sbin/haproxy ]; then HAPROXY=/usr/sbin/haproxy
  else apt_install haproxy; HAPROXY="$(command -v haproxy || echo /usr/sbin/haproxy)"
  fi
}

# A python3 that can import yaml: the one on PATH, Debian's, or Debian's after installing
# python3-yaml.
ensure_pyyaml() {
  for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null && "$py" -c 'import yaml' 2>/dev/null; then PY="$py"; return; fi
  done
  apt_install python3 python3-yaml
  PY=/usr/bin/python3
  "$PY" -c 'import yaml' 2>/dev/null || die "PyYAML still missing after installing python3-yaml"
}

# check NAME COMMAND...: one line per check; the command's output only when it fails.
check() {
  local name="$1"; shift
  if "$@" >"$WORK/out" 2>&1; then
    printf 'ok    %s\n' "$name"
  else
    printf 'FAIL  %s\n' "$name"
    sed 's/^/      /' "$WORK/out"
    FAILED=1
    return 1
  fi
}

ensure_promtool
ensure_haproxy
ensure_pyyaml

# --- Rust version -------------------------------------------------------------------------

# The workspace's `rust-version` (Cargo.toml [workspace.package]) is the one declared
# minimum: every member inherits it, no locked dependency may need a newer compiler, and
# the Dockerfile's RUST_VERSION build argument must say the same; otherwise `docker compose
# up --build` (cargo build --locked on that image) fails while local builds on a newer
# compiler pass. Offline: cargo metadata reads the locked crates' manifests from cargo's
# cache (filled once with `cargo fetch --locked` when it is empty).
rust_version() {
  command -v cargo >/dev/null || { echo "cargo is not installed"; return 1; }
  local host meta="$WORK/metadata.json"
  host="$(rustc -vV | sed -n 's/^host: //p')"
  if ! (cd "$ROOT" && cargo metadata --format-version 1 --locked --offline \
      --filter-platform "$host" >"$meta" 2>"$WORK/metadata.err"); then
    echo "cargo metadata --offline failed; fetching the locked crates once"
    (cd "$ROOT" && cargo fetch --locked -q) || return 1
    (cd "$ROOT" && cargo metadata --format-version 1 --locked --offline \
      --filter-platform "$host" >"$meta") || return 1
  fi
  "$PY" - "$ROOT" "$meta" <<'PYEOF'
import json, re, sys, tomllib
root, meta = sys.argv[1], json.load(open(sys.argv[2]))

def ver(v):
    # "1.89" and "1.89.0" are the same version.
    parts = [int(x) for x in v.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))

ws = tomllib.load(open(f"{root}/Cargo.toml", "rb"))
declared_text = ws.get("workspace", {}).get("package", {}).get("rust-version")
if not declared_text:
    sys.exit("Cargo.toml [workspace.package] declares no rust-version")
declared = ver(declared_text)
errors = []
members = set(meta["workspace_members"])
# Only what a build for this platform compiles (the resolve graph, filtered by platform).
used = {n["id"] for n in meta["resolve"]["nodes"]}
deps = [p for p in meta["packages"] if p["id"] in used and p["id"] not in members]
for p in meta["packages"]:
    if p["id"] in members and (p.get("rust_version") is None or ver(p["rust_version"]) != declared):
        errors.append(f"workspace member {p['name']} declares rust-version {p.get('rust_version')}, "
                      f"not the workspace's {declared_text} (add rust-version.workspace = true)")
for p in deps:
    if p.get("rust_version") and ver(p["rust_version"]) > declared:
        errors.append(f"{p['name']} {p['version']} needs Rust {p['rust_version']}, but Cargo.toml "
                      f"declares rust-version = {declared_text!r}")
dockerfile = open(f"{root}/deploy/compose/Dockerfile").read()
m = re.search(r"^ARG RUST_VERSION=(\S+)\s*$", dockerfile, re.M)
if not m:
    errors.append("deploy/compose/Dockerfile has no `ARG RUST_VERSION=<version>` line")
elif ver(m.group(1)) != declared:
    errors.append(f"deploy/compose/Dockerfile builds with Rust {m.group(1)}, but Cargo.toml "
                  f"declares rust-version = {declared_text!r}")
for e in errors:
    print(e)
if not errors:
    need, name = max((ver(p["rust_version"]), p["name"]) for p in deps if p.get("rust_version"))
    print(f"rust-version {declared_text} in Cargo.toml and the Dockerfile; the most demanding "
          f"locked dependency, {name}, needs {'.'.join(map(str, need))}")
sys.exit(1 if errors else 0)
PYEOF
}
check "Rust version: Cargo.toml, the Dockerfile and every locked dependency agree" rust_version

# Every declared dependency is used: a crate declared and never used still costs every build
# its compile time and widens what must be audited. cargo-machete reads the sources (no
# build); it is installed once from crates.io when missing.
unused_dependencies() {
  command -v cargo >/dev/null || { echo "cargo is not installed"; return 1; }
  if ! command -v cargo-machete >/dev/null; then
    cargo install cargo-machete --locked --quiet || return 1
  fi
  (cd "$ROOT" && cargo machete)
}
check "no unused dependency in any crate (cargo machete)" unused_dependencies

# A crate's modules must form layers: none imports, through others, one that imports it
# (a newcomer reads a crate from its floor up). Every workspace crate with a src/lib.rs.
module_layers() { (cd "$ROOT" && "$PY" deploy/module_cycles.py); }
check "no import cycle between the modules of any crate" module_layers

# Files over 400 code lines and functions over 80 lines say why at their top; today's are
# listed as debt in deploy/sizes_debt.txt, which may only shrink.
sizes() { (cd "$ROOT" && "$PY" deploy/sizes.py); }
check "source files and functions within their sizes (deploy/sizes.py)" sizes &&
  sed 's/^/      /' "$WORK/out"

# --- Prometheus ---------------------------------------------------------------------------

check "promtool check config deploy/prometheus/prometheus.yml (local targets)" \
  "$PROMTOOL" check config "$DEPLOY/prometheus/prometheus.yml"

# The same config as docker-compose mounts it: compose targets in place of the local ones.
compose_prometheus() {
  mkdir -p "$WORK/prom"
  cp "$DEPLOY/prometheus/prometheus.yml" "$DEPLOY/prometheus/alerts.yml" "$WORK/prom/"
  cp -r "$DEPLOY/compose/prometheus-targets" "$WORK/prom/targets"
  "$PROMTOOL" check config "$WORK/prom/prometheus.yml"
}
check "promtool check config (compose targets)" compose_prometheus

check "promtool check rules deploy/prometheus/alerts.yml" \
  "$PROMTOOL" check rules "$DEPLOY/prometheus/alerts.yml"

check "promtool test rules deploy/prometheus/alerts_test.yml" \
  "$PROMTOOL" test rules "$DEPLOY/prometheus/alerts_test.yml"

# --- haproxy ------------------------------------------------------------------------------

# -dW: warnings fail the check too. Runs with the defaults (loopback layout) and with
# every address overridden, as docker-compose does (with resolvable names).
check "haproxy -c deploy/haproxy/haproxy.cfg (defaults)" \
  env -u FG_LB_BIND -u FG_LB_ADMIN -u FG_GATEWAY_1 -u FG_GATEWAY_2 \
  "$HAPROXY" -dW -c -f "$DEPLOY/haproxy/haproxy.cfg"
check "haproxy -c deploy/haproxy/haproxy.cfg (addresses from the environment)" \
  env FG_LB_BIND=0.0.0.0:18080 FG_LB_ADMIN=0.0.0.0:18404 \
  FG_GATEWAY_1=localhost:18081 FG_GATEWAY_2=localhost:18082 \
  "$HAPROXY" -dW -c -f "$DEPLOY/haproxy/haproxy.cfg"

# Runs the real haproxy with this config in front of two stub gateways on free loopback
# ports: claims reach both, a gateway whose /readyz turns 503 leaves the pool and rejoins
# when it is ready again, and the admin frontend serves /metrics; client-sent identity
# and forwarding headers never reach a gateway, haproxy's own X-Forwarded-For does; a
# client past FG_LB_CONN_RATE new connections in 10 s is refused. haproxy is this check's
# child and is stopped on every exit path.
haproxy_routes() {
  "$PY" - "$HAPROXY" "$DEPLOY/haproxy/haproxy.cfg" <<'EOF'
import http.server, json, os, socket, subprocess, sys, threading, time, urllib.request

haproxy, cfg = sys.argv[1], sys.argv[2]

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

ready = {"g1": True, "g2": True}

def stub(name):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def reply(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            if self.path == "/readyz":
                self.reply(200 if ready[name] else 503, {"ready": ready[name]})
            else:
                self.reply(404, {})
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen = {h: self.headers.get_all(h) for h in
                    ["X-Forwarded-For", "Forwarded", "X-Real-IP", "X-User",
                     "X-Forwarded-User", "X-Authenticated-User"]}
            self.reply(201, {"status": "claimed", "gateway": name, "seen": seen})
        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    # haproxy ends its health checks with a reset; that is not an error worth a traceback.
    srv.handle_error = lambda request, client_address: None
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1]

g1, g2 = stub("g1"), stub("g2")
procs = []

def start(conn_rate):
    env = dict(os.environ, FG_GATEWAY_1=f"127.0.0.1:{g1}", FG_GATEWAY_2=f"127.0.0.1:{g2}",
               FG_LB_BIND=f"127.0.0.1:{free_port()}", FG_LB_ADMIN=f"127.0.0.1:{free_port()}",
               FG_LB_CONN_RATE=str(conn_rate))
    proc = subprocess.Popen([haproxy, "-db", "-f", cfg], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    procs.append(proc)
    return proc, env["FG_LB_BIND"], env["FG_LB_ADMIN"]

def post(lb, headers=None):
    req = urllib.request.Request(f"http://{lb}/v1/claims", data=b'{"sku":1,"user":"u"}',
                                 headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=2) as r:
        return json.load(r)

def until(proc, cond, secs, what):
    deadline = time.time() + secs
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit("haproxy exited: " + proc.stderr.read().decode(errors="replace"))
        try:
            if cond():
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"haproxy: {what} within {secs}s")

try:
    # Every urlopen is a new connection: this run allows plenty.
    proc, lb, admin = start(100000)
    served = lambda n=20: {post(lb)["gateway"] for _ in range(n)}
    until(proc, lambda: served() == {"g1", "g2"}, 10, "claims did not reach both gateways")
    ready["g2"] = False
    until(proc, lambda: served() == {"g1"}, 10, "a not-ready gateway was not taken out of the pool")
    ready["g2"] = True
    until(proc, lambda: served() == {"g1", "g2"}, 10, "a gateway ready again did not rejoin the pool")
    with urllib.request.urlopen(f"http://{admin}/metrics", timeout=2) as r:
        if b"haproxy_backend_active_servers" not in r.read():
            sys.exit("haproxy: admin /metrics has no haproxy_backend_active_servers")
    forged = {"X-Forwarded-For": "6.6.6.6", "Forwarded": "for=6.6.6.6", "X-Real-IP": "6.6.6.6",
              "X-User": "mallory", "X-Forwarded-User": "mallory", "X-Authenticated-User": "mallory"}
    seen = post(lb, forged)["seen"]
    want = {"X-Forwarded-For": ["127.0.0.1"], "Forwarded": None, "X-Real-IP": None,
            "X-User": None, "X-Forwarded-User": None, "X-Authenticated-User": None}
    if seen != want:
        sys.exit(f"haproxy: a gateway saw {seen}, expected {want}")
    proc.terminate()
    proc.wait(timeout=5)

    # Connection-rate limit: 5 new connections per 10 s from one address, then refused.
    proc, lb, _ = start(5)
    until(proc, lambda: post(lb) is not None, 10, "haproxy did not come up")
    outcomes = []
    for _ in range(12):
        try:
            post(lb)
            outcomes.append("ok")
        except OSError:
            outcomes.append("refused")
    if "refused" not in outcomes or outcomes[:4] != ["ok"] * 4:
        sys.exit(f"haproxy: connection-rate limit 5/10s gave {outcomes}")
    print("balanced over 2 gateways; a not-ready gateway left and rejoined; /metrics served; "
          "forged identity headers stripped, X-Forwarded-For set; connection rate limited "
          f"({outcomes.count('refused')}/12 refused)")
finally:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
EOF
}
check "haproxy balances 2 stub gateways, follows /readyz, strips client identity headers, limits connection rate" haproxy_routes

# --- docker-compose -----------------------------------------------------------------------

check "compose file is valid YAML" \
  "$PY" -c 'import sys, yaml; yaml.safe_load(open(sys.argv[1]))' "$DEPLOY/compose/docker-compose.yml"

compose_structure() {
  "$PY" - "$DEPLOY/compose/docker-compose.yml" "$ROOT" <<'EOF'
import os, re, sys, yaml

path, root = sys.argv[1], sys.argv[2]
base = os.path.dirname(path)
doc = yaml.safe_load(open(path))
services = doc.get("services") or {}
errors = []

def need(cond, msg):
    if not cond:
        errors.append(msg)

for name in ["redis-1", "redis-2", "redis-3", "redis-4", "redis-5", "redis-6",
             "redis-cluster-init", "mariadb", "consumer", "gateway-1", "gateway-2",
             "haproxy", "prometheus", "grafana"]:
    need(name in services, f"service {name} is missing")

init = services.get("redis-cluster-init", {})
script = " ".join(init.get("command") or [])
need("--cluster-replicas 1" in script, "redis-cluster-init does not create 1 replica per master")
need("for n in 1 2 3 4 5 6" in script, "redis-cluster-init does not use all six nodes")

volumes = set((doc.get("volumes") or {}).keys())
for name, svc in services.items():
    deps = svc.get("depends_on") or []
    for dep in (deps if isinstance(deps, list) else deps.keys()):
        need(dep in services, f"{name} depends on unknown service {dep}")
    for v in svc.get("volumes") or []:
        src = v.split(":")[0] if isinstance(v, str) else v.get("source", "")
        if src.startswith((".", "/")):
            need(os.path.exists(os.path.join(base, src)), f"{name} mounts missing path {src}")
        else:
            need(src in volumes, f"{name} uses undeclared volume {src}")
    for ef in svc.get("env_file") or []:
        ef = {"path": ef} if isinstance(ef, str) else ef
        if ef.get("required", True):
            need(os.path.isfile(os.path.join(base, ef["path"])), f"{name}: env_file {ef['path']} is missing")
    build = svc.get("build")
    if build:
        ctx = os.path.normpath(os.path.join(base, build["context"]))
        dockerfile = os.path.join(ctx, build.get("dockerfile", "Dockerfile"))
        need(os.path.isfile(dockerfile), f"{name}: Dockerfile {dockerfile} not found")
        need(os.path.isfile(os.path.join(ctx, "Cargo.toml")), f"{name}: build context {ctx} is not the workspace")

# Every package the Dockerfile builds is a workspace crate, and its binary is copied.
dockerfile = open(os.path.join(base, "Dockerfile")).read()
workspace = open(os.path.join(root, "Cargo.toml")).read()
for pkg in re.findall(r"\s-p ([a-z][a-z0-9_-]*)", dockerfile):
    need(f'"{pkg}"' in workspace, f"Dockerfile builds {pkg}, which is not a workspace member")
    # A package's binary is named by its [[bin]] section, else after the package.
    manifest = os.path.join(root, pkg, "Cargo.toml")
    bins = re.findall(r'\[\[bin\]\]\s*name\s*=\s*"([^"]+)"', open(manifest).read()) if os.path.isfile(manifest) else []
    for b in bins or [pkg]:
        need(f"target/release/{b}" in dockerfile, f"Dockerfile does not copy the {b} binary of {pkg}")

# The flashgate processes' settings are flags of the binaries (clap env names).
sources = ""
for crate in ("gateway", "consumer", "campaign-ops", "bench"):
    for dirpath, _, files in os.walk(os.path.join(root, crate, "src")):
        for f in files:
            if f.endswith(".rs"):
                sources += open(os.path.join(dirpath, f)).read()
# --redis, --redis-cluster and --shards are defined once for all three binaries.
sources += open(os.path.join(root, "shard-router", "src", "args.rs")).read()
for name, svc in services.items():
    env = svc.get("environment") or {}
    for key in (env if isinstance(env, dict) else [e.split("=")[0] for e in env]):
        if key.startswith("FLASHGATE_"):
            need(f'"{key}"' in sources, f"{name}: {key} is not a setting of gateway/, consumer/, campaign-ops/, bench/ or shard-router/src/args.rs")

# Safe defaults: persistent Redis nodes that refuse writes rather than evict stock, no
# Prometheus lifecycle API, no Grafana admin password in the compose file.
for n in range(1, 7):
    svc = services.get(f"redis-{n}", {})
    cmd = " ".join(svc.get("command") or [])
    need("--appendonly yes" in cmd and "--appendfsync everysec" in cmd, f"redis-{n}: no AOF everysec")
    need(any(str(v).endswith(":/data") for v in svc.get("volumes") or []), f"redis-{n}: no volume on /data")
prom = " ".join(services.get("prometheus", {}).get("command") or [])
need("--web.enable-lifecycle" not in prom, "prometheus: the lifecycle API is on")
genv = services.get("grafana", {}).get("environment") or {}
need("GF_SECURITY_ADMIN_PASSWORD" not in genv, "grafana: admin password set in the compose file; use grafana.env")

for e in errors:
    print(e)
sys.exit(1 if errors else 0)
EOF
}
check "compose services, references, mounts, Dockerfile packages and FLASHGATE_* settings" compose_structure

if docker compose version >/dev/null 2>&1; then
  check "docker compose config" docker compose -f "$DEPLOY/compose/docker-compose.yml" config -q
fi

# --- Grafana ------------------------------------------------------------------------------

check "grafana provisioning files are valid YAML" \
  "$PY" -c 'import sys, yaml; [yaml.safe_load(open(p)) for p in sys.argv[1:]]' \
  "$DEPLOY"/grafana/provisioning/*/*.yml

check "grafana dashboard is valid JSON" \
  "$PY" -c 'import json, sys; json.load(open(sys.argv[1]))' "$DEPLOY/grafana/flashgate.json"

# Every panel query, with Grafana's variables filled in, must parse as PromQL: written out
# as recording rules, promtool parses them.
dashboard_queries() {
  "$PY" - "$DEPLOY/grafana/flashgate.json" "$WORK/dashboard_rules.yml" <<'EOF' || return 1
import json, sys, yaml
dash = json.load(open(sys.argv[1]))
subst = {"$__rate_interval": "1m", "$__interval": "1m", "$gateway": ".*", "$route": "claims"}
rules, uids = [], set()
def walk(panels):
    for p in panels:
        walk(p.get("panels", []))
        for t in p.get("targets", []):
            expr = t["expr"]
            for k, v in subst.items():
                expr = expr.replace(k, v)
            if "$" in expr.replace("{{", ""):
                sys.exit(f"panel {p['title']!r}: unknown variable in {t['expr']}")
            rules.append({"record": f"dashboard:panel_{p['id']}:{t['refId']}", "expr": expr})
walk(dash["panels"])
ids = [p["id"] for p in dash["panels"]]
if len(ids) != len(set(ids)):
    sys.exit("panel ids are not unique")
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(sys.argv[2], "w"))
print(f"{len(rules)} queries")
EOF
  "$PROMTOOL" check rules "$WORK/dashboard_rules.yml"
}
check "grafana dashboard queries parse (promtool)" dashboard_queries

# --- metric names -------------------------------------------------------------------------

# The flashgate_* names the rules and the dashboard use must be exported by the gateway or
# the consumer (histogram suffixes stripped); catches a rename on either side.
metric_names() {
  "$PY" - "$ROOT" "$PENDING_METRICS" <<'EOF'
import os, re, sys
root, pending = sys.argv[1], set(sys.argv[2].split())
used = set()
for f in ("deploy/prometheus/alerts.yml", "deploy/grafana/flashgate.json"):
    text = open(os.path.join(root, f)).read()
    # Names in the rules' header comment are documentation; queries are what must match.
    if f.endswith(".yml"):
        text = text[text.index("groups:"):]
    used |= {re.sub(r"_(bucket|sum|count)$", "", m) for m in re.findall(r"\bflashgate_[a-z_]+", text)}
exported = set()
for crate in ("gateway", "consumer", "campaign-ops", "ledger"):
    for dirpath, _, files in os.walk(os.path.join(root, crate, "src")):
        for name in files:
            if name.endswith(".rs"):
                exported |= set(re.findall(r'"(flashgate_[a-z_]+)"', open(os.path.join(dirpath, name)).read()))
missing = sorted(used - exported - pending)
for m in sorted(used & pending - exported):
    print(f"note: {m} is used but not exported yet (listed in PENDING_METRICS)", file=sys.stderr)
for m in missing:
    print(f"{m} is used by the alerts or the dashboard but exported by none of gateway/, consumer/, campaign-ops/ and ledger/")
print(f"{len(used)} names used, {len(used & exported)} exported")
sys.exit(1 if missing else 0)
EOF
}
check "metric names used by alerts and dashboard are exported by the code" metric_names &&
  grep '^note:' "$WORK/out" | sed 's/^/      /'

if [ "$FAILED" = 0 ]; then
  say "all deploy checks passed"
else
  say "some deploy checks failed"
fi
exit "$FAILED"
