#!/usr/bin/env bash
# Installs the system programs tbhub needs when they are missing: nginx and rsync to run,
# and nginx's Lua module with lua-resty-core (nginx keeps connections to boards open with
# Lua's balancer; without them it proxies with a connection per request);
# with `test`, also Debian's chromium and openssh (browser and ssh-backup tests), sshfs
# with fuse3 (the storage root on a real network filesystem, mounted over loopback), node
# with npm (the OpenID provider the tests sign in against), systemd-analyze (the unit
# in deploy/systemd is verified), docker.io (the container backend tests) and
# docker-compose (docker-compose.yml is brought up), prometheus with promtool (the shipped
# alert rules are checked and made to fire against a real Prometheus), then starts
# dockerd if no Docker daemon answers (deploy/start-dockerd.sh);
# with `bench`, also wrk and docker.io.
# As root it uses apt-get; otherwise it says exactly what to install and stops.
set -euo pipefail
missing=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }
have nginx || missing+=(nginx)
have rsync || missing+=(rsync)
[ -e /usr/lib/nginx/modules/ngx_http_lua_module.so ] || missing+=(libnginx-mod-http-lua)
[ -e /usr/share/lua/5.1/ngx/balancer.lua ] || missing+=(lua-resty-core)
case "${1:-}" in
  test)
    have chromium || missing+=(chromium)
    have node || missing+=(nodejs)
    have npm || missing+=(npm)
    have ssh || missing+=(openssh-client)
    [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
    have sshfs || missing+=(sshfs)
    have fusermount3 || missing+=(fuse3)
    have systemd-analyze || missing+=(systemd)
    have dockerd || missing+=(docker.io)
    have docker-compose || missing+=(docker-compose)
    have promtool || missing+=(prometheus) ;;
  bench)
    have wrk || missing+=(wrk)
    have dockerd || missing+=(docker.io) ;;
esac
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "tbhub needs: ${missing[*]}" >&2
    echo "install them first, for example: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
case "${1:-}" in
  test|bench) "$(dirname "$0")/start-dockerd.sh" ;;
esac
