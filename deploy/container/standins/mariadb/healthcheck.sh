#!/bin/bash
# The part of the official mariadb image's healthcheck.sh that deploy/compose uses:
#   --connect             a TCP connection is accepted (not only the socket)
#   --innodb_initialized  InnoDB is up
# with the health-check account the entrypoint made. Any other test is refused (exit 2),
# so a compose file that starts relying on one fails here instead of passing untested.
set -u
cnf=/var/lib/mysql/.my-healthcheck.cnf
[ -r "$cnf" ] || { echo "healthcheck.sh: $cnf missing (not initialised yet)"; exit 1; }
client=(mariadb --defaults-extra-file="$cnf" --protocol=tcp -h127.0.0.1 --batch --skip-column-names)
for arg in "$@"; do
  case "$arg" in
    --connect)
      "${client[@]}" -e 'SELECT 1' >/dev/null || exit 1 ;;
    --innodb_initialized)
      ok=$("${client[@]}" -e "SELECT 1 FROM information_schema.ENGINES WHERE engine = 'InnoDB' AND support IN ('YES', 'DEFAULT', 'ENABLED')") || exit 1
      [ "$ok" = 1 ] || exit 1 ;;
    *)
      echo "healthcheck.sh (stand-in): $arg is not implemented"; exit 2 ;;
  esac
done
exit 0
