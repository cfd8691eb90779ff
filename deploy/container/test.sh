#!/usr/bin/env bash
# flashgate where users run it: the image built from deploy/compose/Dockerfile, the compose
# stack started from deploy/compose/docker-compose.yml as it is, a sale through haproxy with
# bench in its container, a rolling restart of the gateways and the consumer mid-sale,
# Prometheus queried live, and deploy/k8s rendered, validated and its gateway played with
# `podman kube play` answering a claim. docs/CONTAINERS.md says what each step stands in
# for. Installs what it needs (podman, runc, debootstrap with apt-get; podman-compose and
# kubernetes-validate with pip) and removes every container, network, volume and image it
# made, checked at the end against what was there before.
#
#   ./deploy/container/test.sh
#
# FG_CT_KEEP=1 leaves the stack up for a look (then run it again, or remove the project
# `flashgate` and the images labelled org.flashgate.standin by hand).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$FG_ROOT"

COMPOSE_FILE=deploy/compose/docker-compose.yml
K8S_VERSION=1.32.0
# Grafana: no registry here carries it and Debian has no package; the compose file's
# Grafana service is still checked as text by deploy/check.sh.
SKIPPED_SERVICES=(grafana)
T0=$(stamp)
WORK=$(mktemp -d /tmp/flashgate-container.XXXXXX)
chmod 777 "$WORK"
NOTES="$WORK/notes.txt"
note() { printf '%s\n' "$*" | tee -a "$NOTES" >&2; }
step() { say "[$(elapsed "$T0") s] $*"; }

pc() { podman-compose --in-pod false -p "$FG_PROJECT" -f "$COMPOSE_FILE" "$@"; }
ctr() { echo "${FG_PROJECT}_$1_1"; }

# What was there before, so the end can show nothing was left behind.
inventory() {
  {
    podman ps -aq --no-trunc | sed 's/^/container /'
    podman images -aq --no-trunc | sed 's/^/image /'
    podman volume ls -q | sed 's/^/volume /'
    podman network ls -q | sed 's/^/network /'
    podman pod ps -q --no-trunc | sed 's/^/pod /'
    podman secret ls --format '{{.Name}}' | sed 's/^/secret /'
  } | sort -u
}

TICKER=""
SAMPLER=""
cleanup() {
  local rc=$?
  set +e
  [ -n "$TICKER" ] && kill "$TICKER" 2>/dev/null
  [ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null
  unmount_build_cache
  if [ "${FG_CT_KEEP:-0}" = 1 ]; then
    say "FG_CT_KEEP=1: stack left up; work files in $WORK"
    exit "$rc"
  fi
  step "cleaning up"
  [ -f "$WORK/kube.yaml" ] && podman kube down "$WORK/kube.yaml" >/dev/null 2>&1
  # kube down leaves the Secrets it played in podman's secret store.
  grep -qx 'secret flashgate-secrets' "$WORK/before.txt" 2>/dev/null ||
    podman secret rm flashgate-secrets >/dev/null 2>&1
  # Containers first, with their anonymous volumes (the redis image's VOLUME /data in the
  # one-shot cluster init), then what `down -v` removes: named volumes, the network.
  local ids v
  ids=$(podman ps -aq --filter "label=io.podman.compose.project=$FG_PROJECT")
  [ -n "$ids" ] && podman rm -f -v -t 0 $ids >/dev/null 2>&1
  pc --profile bench down -v -t 5 >/dev/null 2>&1
  ids=$(podman volume ls -q --filter "label=io.podman.compose.project=$FG_PROJECT")
  [ -n "$ids" ] && podman volume rm -f $ids >/dev/null 2>&1
  podman network rm -f "${FG_PROJECT}_default" >/dev/null 2>&1
  # Anonymous volumes (an image's VOLUME with nothing mounted over it) that appeared during
  # the run and that `rm -v` left: podman-compose's one-shot containers leave one.
  for v in $(podman volume ls -q); do
    grep -qx "volume $v" "$WORK/before.txt" 2>/dev/null && continue
    [ "$(podman volume inspect --format '{{.Anonymous}}' "$v" 2>/dev/null)" = true ] &&
      podman volume rm -f "$v" >/dev/null 2>&1
  done
  ids=$(podman images -q --filter "label=$FG_CT_LABEL")
  [ -n "$ids" ] && podman rmi -f $ids >/dev/null 2>&1
  # The pod's infra image kube play builds when there is none.
  for v in $(podman images -q --no-trunc --filter reference=localhost/podman-pause); do
    grep -qx "image $v" "$WORK/before.txt" 2>/dev/null || podman rmi -f "$v" >/dev/null 2>&1
  done
  if [ -f "$WORK/before.txt" ]; then
    inventory >"$WORK/after.txt"
    local left
    left=$(comm -13 "$WORK/before.txt" "$WORK/after.txt")
    if [ -n "$left" ]; then
      say "error: left behind:"; printf '%s\n' "$left" >&2
      [ "$rc" = 0 ] && rc=1
    else
      say "nothing left behind (containers, images, volumes, networks, pods as before)"
    fi
  fi
  if [ "$rc" = 0 ]; then
    say "container test passed in $(elapsed "$T0") s"
    cat "$NOTES" >&2
    rm -rf "$WORK"
  else
    say "container test FAILED (work files kept in $WORK)"
  fi
  exit "$rc"
}
trap cleanup EXIT

ensure_container_tools
mkdir -p "$FG_CT_CACHE"
inventory >"$WORK/before.txt"

# --- Kubernetes manifests: offline, first (seconds) -----------------------------------------
source "$FG_CT_DIR/k8s.sh"
step "deploy/k8s: render, kubernetes-validate --strict ($K8S_VERSION), conventions"
k8s_static_checks

# --- images -----------------------------------------------------------------------------------
step "images: debian:bookworm-slim (debootstrap), stand-ins"
t=$(stamp)
ensure_base_image
ensure_standins
note "base and stand-in images: $(elapsed "$t") s"
step "image: deploy/compose/Dockerfile"
t=$(stamp)
build_flashgate_image
unmount_build_cache
note "flashgate image build: $(elapsed "$t") s"
source "$FG_CT_DIR/image_checks.sh"
image_checks

# --- the compose stack ------------------------------------------------------------------------
source "$FG_CT_DIR/stack.sh"
step "compose: up in dependency order (without ${SKIPPED_SERVICES[*]})"
t=$(stamp)
compose_up
note "compose stack up: $(elapsed "$t") s"

step "sale through haproxy: bench in its container"
compose_sale

step "rolling restart mid-sale"
rolling_restart

# --- a gateway down (alert drill) while kube play runs, then Prometheus -----------------------
source "$FG_CT_DIR/prometheus.sh"
step "alert drill: gateway-2 stopped, FlashgateTargetDown must fire"
drill_start

step "podman kube play: the gateway's Deployment, ConfigMap and Secret"
k8s_play

drill_wait
# After the drill, so the restarted consumer has reconciled the campaigns once (every 60 s):
# the reconciliation series exist from then on.
step "Prometheus: every alert rule's and dashboard panel's query, live"
prometheus_queries
step "done"
