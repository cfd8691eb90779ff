# Shared helpers for deploy/container/*.sh. Sourced, not run.
#
# Where no Docker engine runs and no registry is reachable, the tests run the repository's
# Dockerfile and compose file with Debian's podman (runc) instead, on images they make:
# a debootstrap base imported as debian:bookworm-slim and stand-ins for the official images
# (deploy/container/standins/*), each labelled org.flashgate.standin so the tests remove
# only what they made. An image of the same name that was already there (a real one,
# pulled from a registry) is used as it is and never removed.

source "$(dirname "${BASH_SOURCE[0]}")/../local/lib.sh"

FG_CT_DIR="$FG_ROOT/deploy/container"
# Kept between runs, never an image: the debootstrap tarball and the release build's
# target directory (so the second run's image build is incremental).
FG_CT_CACHE="${FG_CT_CACHE:-/var/tmp/flashgate-container}"
FG_CT_LABEL=org.flashgate.standin
FG_PROJECT=flashgate
DEBIAN_SUITE=bookworm

# The official images the Dockerfile and compose file name, and the stand-in for each.
# Full names, as Docker resolves the short ones.
declare -A FG_STANDIN=(
  [docker.io/library/rust:1.89-bookworm]=rust
  [docker.io/library/redis:7.2-bookworm]=redis
  [docker.io/library/mariadb:11.4]=mariadb
  [docker.io/library/haproxy:2.8]=haproxy
  [docker.io/prom/prometheus:v2.53.2]=prometheus
)
FG_BASE_IMAGE=docker.io/library/debian:bookworm-slim
FG_IMAGE=localhost/flashgate:local

stamp() { date +%s; }
elapsed() { echo $(($(date +%s) - $1)); }

image_exists() { podman image exists "$1"; }
# Made by these tests (carries the label) — the only images cleanup removes.
image_ours() {
  [ "$(podman image inspect --format "{{ index .Labels \"$FG_CT_LABEL\" }}" "$1" 2>/dev/null)" != "" ] &&
    [ "$(podman image inspect --format "{{ index .Labels \"$FG_CT_LABEL\" }}" "$1" 2>/dev/null)" != "<no value>" ]
}

# podman, runc, debootstrap from Debian; podman-compose and kubernetes-validate from PyPI.
ensure_container_tools() {
  ensure_packages podman:podman runc:runc debootstrap:debootstrap
  # crun fails on a hybrid cgroup layout, and both runtimes fail to set podman's default
  # rlimits in a sandbox that caps them: runc, and the limits the process already has.
  local conf=/etc/containers/containers.conf.d/50-flashgate.conf
  if [ ! -f "$conf" ]; then
    say "writing $conf (runtime runc, no default ulimits)"
    as_root mkdir -p "$(dirname "$conf")"
    printf '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n' | as_root tee "$conf" >/dev/null
  fi
  local py=python3 missing=()
  command -v podman-compose >/dev/null || missing+=(podman-compose)
  command -v kubernetes-validate >/dev/null || missing+=(kubernetes-validate)
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} with pip"
    "$py" -m pip install -q "${missing[@]}" || die "pip install ${missing[*]} failed"
  fi
}

# debian:bookworm-slim from Debian's own packages (minbase), as the official image is.
ensure_base_image() {
  image_exists "$FG_BASE_IMAGE" && return 0
  local tar="$FG_CT_CACHE/debian-$DEBIAN_SUITE-minbase.tar"
  if [ ! -s "$tar" ]; then
    say "debootstrap $DEBIAN_SUITE (minbase) for $FG_BASE_IMAGE"
    local root="$FG_CT_CACHE/rootfs.$$"
    as_root rm -rf "$root"
    as_root debootstrap --variant=minbase "$DEBIAN_SUITE" "$root" http://deb.debian.org/debian \
      >"$FG_CT_CACHE/debootstrap.log" 2>&1 || die "debootstrap failed (see $FG_CT_CACHE/debootstrap.log)"
    # What the official slim image leaves out: apt lists and caches, docs kept.
    as_root rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
    as_root tar -C "$root" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
    as_root rm -rf "$root"
  fi
  say "importing $FG_BASE_IMAGE"
  podman import --change "LABEL $FG_CT_LABEL=debian:$DEBIAN_SUITE-slim (debootstrap minbase)" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' "$tar" "$FG_BASE_IMAGE" >/dev/null
}

# build_standin NAME — the stand-in under the official name, unless a real one is there.
build_standin() {
  local name="$1" dir="$FG_CT_DIR/standins/$2"
  shift 2
  image_exists "$name" && return 0
  say "building stand-in $name from ${dir#"$FG_ROOT"/}"
  podman build -q --pull=never --layers=false --label "$FG_CT_LABEL=$name" -t "$name" "$@" "$dir" >/dev/null ||
    die "stand-in $name did not build"
}

# In parallel (their time is mostly apt downloads); Debian's .deb files are kept in the
# cache folder, one per stand-in (apt locks its archive folder), so a second run downloads
# only the package lists.
ensure_standins() {
  local name pids=() apt
  for name in "${!FG_STANDIN[@]}"; do
    apt="$FG_CT_CACHE/apt-archives/${FG_STANDIN[$name]}"
    mkdir -p "$apt/partial"
    case "${FG_STANDIN[$name]}" in
      rust) build_standin "$name" rust -v "$apt:/var/cache/apt/archives" \
              -v "$(rustc --print sysroot):/host-toolchain:ro" & ;;
      *) build_standin "$name" "${FG_STANDIN[$name]}" -v "$apt:/var/cache/apt/archives" & ;;
    esac
    pids+=($!)
  done
  local pid failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  [ "$failed" = 0 ] || die "a stand-in image did not build"
}

# The build cache the Dockerfile's cache mounts use (buildah keeps a mount with no id in
# /var/tmp/buildah-cache/<target>): the host's cargo registry is bind-mounted there, so
# the build downloads no crate the host already has, and the release target directory is
# kept in the cache folder, so a second build only recompiles what changed. Unmounted by
# unmount_build_cache (the test's exit trap).
FG_BUILDAH_CACHE=/var/tmp/buildah-cache
mount_build_cache() {
  local registry="${CARGO_HOME:-$HOME/.cargo}/registry"
  mkdir -p "$FG_CT_CACHE/target" "$FG_BUILDAH_CACHE/src/target" "$FG_BUILDAH_CACHE/usr/local/cargo/registry"
  mountpoint -q "$FG_BUILDAH_CACHE/src/target" ||
    as_root mount --bind "$FG_CT_CACHE/target" "$FG_BUILDAH_CACHE/src/target"
  if [ -d "$registry" ] && ! mountpoint -q "$FG_BUILDAH_CACHE/usr/local/cargo/registry"; then
    as_root mount --bind "$registry" "$FG_BUILDAH_CACHE/usr/local/cargo/registry"
  fi
}
unmount_build_cache() {
  local m
  for m in "$FG_BUILDAH_CACHE/usr/local/cargo/registry" "$FG_BUILDAH_CACHE/src/target"; do
    if mountpoint -q "$m"; then as_root umount "$m" || true; fi
  done
}

# flashgate:local from deploy/compose/Dockerfile, as `docker compose build` makes it.
build_flashgate_image() {
  mount_build_cache
  say "building $FG_IMAGE from deploy/compose/Dockerfile (release build)"
  local log="$FG_CT_CACHE/image-build.log"
  podman build --pull=never --layers=false --label "$FG_CT_LABEL=flashgate:local" \
    --ignorefile "$FG_ROOT/deploy/compose/Dockerfile.dockerignore" \
    -f "$FG_ROOT/deploy/compose/Dockerfile" -t "$FG_IMAGE" "$FG_ROOT" >"$log" 2>&1 ||
    { tail -40 "$log" >&2; die "the image did not build (log: $log)"; }
}
