#!/usr/bin/env bash
# Installs the system programs tbhub runs (nginx, rsync) when they are missing.
# As root it uses apt-get; otherwise it says exactly what to install and stops.
set -euo pipefail
missing=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "tbhub needs: ${missing[*]}" >&2
  echo "install them first, for example: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
