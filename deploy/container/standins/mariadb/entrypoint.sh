#!/bin/bash
# The official mariadb image's first-start contract (see the Containerfile): initialise an
# empty data directory from the MARIADB_* environment with a server that listens on its
# socket only, then run mariadbd as mysql with the given options.
set -euo pipefail
if [ "${1:0:1}" = - ]; then set -- mariadbd "$@"; fi
[ "$1" = mariadbd ] || exec "$@"

datadir=/var/lib/mysql
socket=/run/mysqld/mysqld.sock
chown -R mysql:mysql "$datadir" /run/mysqld
if [ ! -d "$datadir/mysql" ]; then
  : "${MARIADB_ROOT_PASSWORD:?the stand-in needs MARIADB_ROOT_PASSWORD}"
  echo "stand-in mariadb: initialising $datadir"
  mariadb-install-db --user=mysql --datadir="$datadir" --skip-test-db \
    --auth-root-authentication-method=normal >/dev/null
  mariadbd --user=mysql --datadir="$datadir" --skip-networking --socket="$socket" &
  pid=$!
  for _ in $(seq 60); do mariadb-admin --socket="$socket" -uroot ping >/dev/null 2>&1 && break; sleep 0.5; done
  hc_password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
  {
    echo "ALTER USER 'root'@'localhost' IDENTIFIED BY '${MARIADB_ROOT_PASSWORD}';"
    echo "CREATE USER 'root'@'%' IDENTIFIED BY '${MARIADB_ROOT_PASSWORD}';"
    echo "GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;"
    # The official image's health-check account, whose credentials healthcheck.sh reads.
    echo "CREATE USER 'healthcheck'@'localhost' IDENTIFIED BY '${hc_password}';"
    echo "CREATE USER 'healthcheck'@'127.0.0.1' IDENTIFIED BY '${hc_password}';"
    echo "CREATE USER 'healthcheck'@'::1' IDENTIFIED BY '${hc_password}';"
    echo "GRANT USAGE ON *.* TO 'healthcheck'@'localhost', 'healthcheck'@'127.0.0.1', 'healthcheck'@'::1';"
    if [ -n "${MARIADB_DATABASE:-}" ]; then
      echo "CREATE DATABASE IF NOT EXISTS \`${MARIADB_DATABASE}\`;"
    fi
    if [ -n "${MARIADB_USER:-}" ]; then
      echo "CREATE USER '${MARIADB_USER}'@'%' IDENTIFIED BY '${MARIADB_PASSWORD:?MARIADB_USER needs MARIADB_PASSWORD}';"
      [ -z "${MARIADB_DATABASE:-}" ] || echo "GRANT ALL ON \`${MARIADB_DATABASE}\`.* TO '${MARIADB_USER}'@'%';"
    fi
    echo "FLUSH PRIVILEGES;"
  } | mariadb --socket="$socket" -uroot
  printf '[mariadb-client]\nport=3306\nsocket=%s\nuser=healthcheck\npassword=%s\n' \
    "$socket" "$hc_password" >"$datadir/.my-healthcheck.cnf"
  chown mysql:mysql "$datadir/.my-healthcheck.cnf"
  chmod 600 "$datadir/.my-healthcheck.cnf"
  kill "$pid"
  wait "$pid" || true
  echo "stand-in mariadb: initialised"
fi
shift
exec mariadbd --user=mysql --datadir="$datadir" --socket="$socket" "$@"
