#!/usr/bin/env bash
# Makes sure a Docker engine answers on /var/run/docker.sock.
# Installs Debian's docker.io when dockerd is missing; containers are run with host networking only,
# so the engine is started without its default bridge (no traffic ever goes to a bridge address).
set -euo pipefail

log() { echo "[ensure-dockerd] $*" >&2; }

if docker info >/dev/null 2>&1; then
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  log "installing docker.io from Debian"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi

mkdir -p /var/log
log "starting dockerd (vfs storage, no bridge)"
# vfs works on any filesystem (overlay-on-overlay does not); --bridge=none keeps docker0 from existing.
nohup dockerd --storage-driver=vfs --bridge=none --iptables=false --ip6tables=false \
  >/var/log/kubebyon-dockerd.log 2>&1 &

for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    log "dockerd is up"
    exit 0
  fi
  sleep 1
done
log "dockerd did not come up; last log lines:"
tail -n 30 /var/log/kubebyon-dockerd.log >&2 || true
exit 1
