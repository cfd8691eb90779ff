# Process groups for the scripts in bench/external/ (sourced, not run): each process they
# start runs in its own group (setsid) and is listed in `groups`; `stop` ends one, and
# every group still listed is stopped on exit. A stop is SIGCONT (a paused process must
# see the SIGTERM) and SIGTERM to the leader, then SIGKILL to the whole group after
# STOP_WAIT_S seconds (default 15). Needs `work` (the caller's scratch directory, named in
# wait_for's message).

groups=()
stop_group() {
  local pid="$1"
  kill -CONT "$pid" 2>/dev/null || true
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 $((${STOP_WAIT_S:-15} * 5))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -KILL -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local g
  for g in "${groups[@]}"; do stop_group "$g"; done
  groups=()
}
# Stops one group and forgets it.
stop() {
  local g kept=()
  stop_group "$1"
  for g in "${groups[@]}"; do [ "$g" = "$1" ] || kept+=("$g"); done
  groups=("${kept[@]}")
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Waits (bounded) until `cmd` succeeds: wait_for <what> <limit s> <cmd...>.
wait_for() {
  local what="$1" limit="$2"
  shift 2
  for _ in $(seq 1 $((limit * 5))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "$0: $what not ready after ${limit}s ($work)" >&2
  return 1
}
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Instructions since the last zero of `pid` under callgrind (run with
# --callgrind-out-file=$work/cg.%p; dumps $work/cg.<pid>.N),
# its dump kept as $work/<name>.callgrind.
dump() {
  local pid="$1" name="$2" f=""
  timeout 120 callgrind_control -d "$pid" >/dev/null 2>&1
  for _ in $(seq 1 600); do
    f="$(ls -t "$work/cg.$pid".* 2>/dev/null | head -1 || true)"
    [ -n "$f" ] && grep -q '^totals:' "$f" && break
    f=""
    sleep 0.2
  done
  [ -n "$f" ] || { echo "$0: no callgrind dump of $pid" >&2; return 1; }
  mv "$f" "$work/$name.callgrind"
  awk '/^totals:/ {print $2}' "$work/$name.callgrind"
}
