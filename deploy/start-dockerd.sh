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

# A pidfile whose PID is no live dockerd (killed: gone, or a zombie not yet reaped) is stale;
# dockerd refuses to start while the PID it names exists at all.
if [ -f "$PIDFILE" ]; then
  old=$(cat "$PIDFILE")
  state=$(awk '{print $3}' "/proc/$old/stat" 2>/dev/null || true)
  if [ "$(cat "/proc/$old/comm" 2>/dev/null)" != dockerd ] || [ "$state" = Z ]; then
    rm -f "$PIDFILE"
  fi
fi

driver=overlay2
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || driver=vfs

start() {
  echo "starting dockerd ($driver $*); log: $LOG"
  mark=$(stat -c %s "$LOG" 2>/dev/null || echo 0)
  # setsid: the daemon outlives this script and the make/pytest run that called it.
  setsid dockerd --pidfile "$PIDFILE" --storage-driver "$driver" "$@" >>"$LOG" 2>&1 </dev/null &
  started=$!
  for _ in $(seq "$TIMEOUT"); do
    answers && return 0
    kill -0 "$started" 2>/dev/null || return 1  # it exited: see the log
    sleep 1
  done
  kill "$started" 2>/dev/null
  return 1
}
# What this attempt logged says iptables failed.
iptables_failed() { tail -c "+$((mark + 1))" "$LOG" | grep -qiE "iptables.*(fail|error)|(fail|error).*iptables"; }

# Right after a daemon was killed its containerd may still be going away: try again.
for attempt in 1 2 3; do
  start && exit 0
  iptables_failed && break
  echo "dockerd exited (attempt $attempt); trying again" >&2
  sleep 3
done
if iptables_failed; then
  sleep 2
  start --iptables=false && exit 0
fi
echo "dockerd did not answer within ${TIMEOUT}s; see $LOG" >&2
exit 1
