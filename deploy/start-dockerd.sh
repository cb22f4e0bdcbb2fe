#!/usr/bin/env bash
# Starts a Docker daemon when none answers, for the container backend tests and for
# TBHUB_BOARD_BACKEND=docker|swarm on a machine without systemd. The daemon is tracked by its
# pidfile and logs to a file; nothing is stopped by name.
#
#   deploy/start-dockerd.sh            start dockerd unless one answers; wait until it does
#
# Storage driver: overlay2, or vfs where the kernel has no overlay filesystem. If dockerd
# cannot set up iptables (some sandboxes), it is started again with --iptables=false: boards
# still run, but the board network's "no traffic between containers" then is not enforced.
set -euo pipefail
PIDFILE=${TBHUB_DOCKERD_PIDFILE:-/var/run/docker.pid}
LOG=${TBHUB_DOCKERD_LOG:-/var/log/tbhub-dockerd.log}
TIMEOUT=${TBHUB_DOCKERD_TIMEOUT:-60}

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
answers && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "no Docker daemon answers; start one (as root: $0, or systemctl start docker)" >&2
  exit 1
fi
command -v dockerd >/dev/null 2>&1 || { echo "dockerd is missing: apt-get install docker.io" >&2; exit 1; }

driver=overlay2
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || driver=vfs

start() {
  echo "starting dockerd ($driver $*); log: $LOG"
  # setsid: the daemon outlives this script and the make/pytest run that called it.
  setsid dockerd --pidfile "$PIDFILE" --storage-driver "$driver" "$@" >>"$LOG" 2>&1 </dev/null &
  for _ in $(seq "$TIMEOUT"); do
    answers && return 0
    [ -f "$PIDFILE" ] && ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null && return 1
    sleep 1
  done
  return 1
}

start && exit 0
if grep -qi iptables "$LOG"; then
  [ -f "$PIDFILE" ] && kill "$(cat "$PIDFILE")" 2>/dev/null && sleep 2
  start --iptables=false && exit 0
fi
echo "dockerd did not answer within ${TIMEOUT}s; see $LOG" >&2
exit 1
