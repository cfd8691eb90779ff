# The image's contract, before any stack: a non-root user, tini as PID 1, and SIGTERM
# reaching the gateway (it drains and exits 0 well before the stop timeout's SIGKILL).
# Sourced by deploy/container/test.sh.

image_checks() {
  local user entry uid
  user=$(podman image inspect --format '{{.Config.User}}' "$FG_IMAGE")
  entry=$(podman image inspect --format '{{join .Config.Entrypoint " "}}' "$FG_IMAGE")
  uid=$(podman run --rm --entrypoint id "$FG_IMAGE" -u)
  [ "$user" = flashgate ] || die "image user is '$user', not flashgate"
  [ "$uid" != 0 ] || die "image runs as root"
  [ "${entry%% *}" = /usr/bin/tini ] || die "image entrypoint is '$entry', not tini"
  local name="${FG_PROJECT}-sigterm-check"
  # No Redis: the gateway stays up, not ready, until told to stop. Its identity source
  # is the compose file's development token secret, mounted as compose mounts it.
  podman run -d --name "$name" -e FLASHGATE_REDIS=redis://127.0.0.1:1 \
    -e FLASHGATE_TOKEN_SECRET_FILE=/run/flashgate/token-secret \
    -v "$FG_ROOT/deploy/compose/token-secret.dev:/run/flashgate/token-secret:ro" "$FG_IMAGE" >/dev/null
  local i
  for i in $(seq 50); do
    podman exec "$name" curl -fsS -o /dev/null http://127.0.0.1:9090/healthz 2>/dev/null && break
    sleep 0.2
  done
  local t code
  t=$(date +%s%N)
  podman stop -t 30 "$name" >/dev/null
  t=$((($(date +%s%N) - t) / 1000000))
  code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
  podman logs "$name" >"$WORK/sigterm-check.log" 2>&1
  podman rm -f "$name" >/dev/null
  [ "$code" = 0 ] || die "gateway exited $code on SIGTERM (137: it never got it; log: $WORK/sigterm-check.log)"
  [ "$t" -lt 25000 ] || die "gateway took $t ms to stop on SIGTERM"
  note "image: user $user (uid $uid), entrypoint $entry; SIGTERM → gateway exit 0 in $t ms (drain delay 4 s)"
}
