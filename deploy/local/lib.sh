# Shared helpers for the deploy/local scripts. Sourced, not run.
# Every step is idempotent: it checks before it installs or starts anything.

FG_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FG_MYSQL_USER=flashgate
FG_MYSQL_PASSWORD=flashgate

say() { printf 'flashgate: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    die "need root (or sudo) to run: $*"
  fi
}

# ensure_packages CMD:PACKAGE ... — apt-get installs PACKAGE when CMD is missing.
ensure_packages() {
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them; install them by hand"
  say "installing ${missing[*]} with apt-get"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null ||
    die "apt-get update failed; install ${missing[*]} by hand"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null ||
    die "apt-get install ${missing[*]} failed; install them by hand"
}

ensure_rust() {
  command -v cargo >/dev/null || die "cargo not found: install Rust from https://rustup.rs first"
}

# The machine's shared Redis on 6379 (the demo and the tests start private ones as well;
# this one is only started when nothing answers there).
ensure_redis() {
  # openssl: the TLS tests make a throw-away CA and server certificate with it.
  ensure_packages redis-server:redis-server redis-cli:redis-tools openssl:openssl
  if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    say "starting redis-server on 127.0.0.1:6379"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
      --logfile /tmp/flashgate-redis-6379.log >/dev/null
    for _ in $(seq 50); do redis-cli -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-cli -p 6379 ping >/dev/null 2>&1 || die "redis-server did not start (see /tmp/flashgate-redis-6379.log)"
  fi
  # Redis 6 and older persist and replicate scripts, which the claim path's guard relies
  # on them not doing (docs/DESIGN.md "A Redis that comes back older").
  local major
  major=$(redis-server --version | sed -n 's/.* v=\([0-9]*\)\..*/\1/p')
  [ "${major:-0}" -ge 7 ] || die "redis-server 7.0 or later is required (found: $(redis-server --version))"
}

# MariaDB on 127.0.0.1:3306 with a `flashgate` user reachable over TCP (Debian's root uses
# unix-socket auth, which TCP clients cannot use).
ensure_mariadb() {
  ensure_packages mariadbd:mariadb-server mariadb:mariadb-client
  if ! mariadb-admin ping >/dev/null 2>&1 && ! mariadb-admin -h127.0.0.1 -uroot ping >/dev/null 2>&1; then
    say "starting mariadbd"
    as_root mkdir -p /run/mysqld
    as_root chown mysql:mysql /run/mysqld 2>/dev/null || true
    as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
    for _ in $(seq 100); do mariadb-admin ping >/dev/null 2>&1 && break; sleep 0.2; done
    mariadb-admin ping >/dev/null 2>&1 || die "mariadbd did not start"
  fi
  if ! mariadb -h127.0.0.1 -P3306 -u"$FG_MYSQL_USER" -p"$FG_MYSQL_PASSWORD" -e 'SELECT 1' >/dev/null 2>&1; then
    say "creating MariaDB user $FG_MYSQL_USER"
    local sql="CREATE USER IF NOT EXISTS '$FG_MYSQL_USER'@'%' IDENTIFIED BY '$FG_MYSQL_PASSWORD';
      CREATE USER IF NOT EXISTS '$FG_MYSQL_USER'@'localhost' IDENTIFIED BY '$FG_MYSQL_PASSWORD';
      GRANT ALL PRIVILEGES ON *.* TO '$FG_MYSQL_USER'@'%';
      GRANT ALL PRIVILEGES ON *.* TO '$FG_MYSQL_USER'@'localhost'; FLUSH PRIVILEGES;"
    as_root mariadb -uroot -e "$sql" 2>/dev/null || mariadb -h127.0.0.1 -uroot -e "$sql" ||
      die "cannot create the MariaDB user $FG_MYSQL_USER (need root access to MariaDB)"
  fi
  export FLASHGATE_TEST_MYSQL_URL="mysql://$FG_MYSQL_USER:$FG_MYSQL_PASSWORD@127.0.0.1:3306"
}
