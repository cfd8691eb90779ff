#!/bin/sh
# As the official redis image's entrypoint does: a server started as root owns its data
# directory and runs as the redis user; any other command runs as given. The official
# image's redis-server is built with protected mode off by default (it has no config file
# to bind it to loopback; the container network is the boundary); Debian's is not, so the
# stand-in says so on the command line unless the command already does.
set -e
if [ "$1" = redis-server ]; then
  case " $* " in
    *" --protected-mode "*) ;;
    *) set -- "$@" --protected-mode no ;;
  esac
  if [ "$(id -u)" = 0 ]; then
    chown -R redis:redis /data
    exec setpriv --reuid=redis --regid=redis --init-groups "$@"
  fi
fi
exec "$@"
