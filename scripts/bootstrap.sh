#!/usr/bin/env bash
# Installs what this project needs on a fresh Debian 12 machine with Node 20: system packages, npm
# dependencies, a running Docker engine with Compose v2, the local HAProxy test-bed images, the adapter's
# image, and (for the tests) kube-apiserver + etcd and helm.
#   scripts/bootstrap.sh           everything scripts/test-all.sh needs
#   scripts/bootstrap.sh --local   only what scripts/run-local.sh needs (no Go, Kubernetes, HAProxy 2.6)
# Safe to run again: every step is skipped when its result is already there.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

log() { echo "[bootstrap] $*" >&2; }

case "${1:-}" in
  "") tests=true ;;
  --local) tests=false ;;
  *) log "usage: $0 [--local]"; exit 64 ;;
esac

need=()
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v dpkg-deb >/dev/null 2>&1 || need+=(dpkg)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
# promtool parses /metrics in tests
if $tests && ! command -v promtool >/dev/null 2>&1; then need+=(prometheus); fi
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Go comes with the machine image; a non-login shell may not have it on PATH.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then export PATH="$PATH:/usr/local/go/bin"; fi
if $tests && ! command -v go >/dev/null 2>&1; then
  log "Go is needed to build kube-apiserver for the tests"
  exit 1
fi

node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  log "Node.js >= 20 is required, found $(node --version)"
  exit 1
fi

# Reinstall only when the lock file changed since the last install.
stamp=node_modules/.kubebyon-lock-hash
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  log "installing npm dependencies"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" >"$stamp"
fi

scripts/ensure-dockerd.sh
scripts/install-compose.sh
if $tests; then scripts/build-testbed-images.sh; else scripts/build-testbed-images.sh 3.0; fi
scripts/build-adapter-image.sh
$tests || exit 0
# A real kube-apiserver (built through the Go module proxy; minutes when cold, cached after) and etcd, and
# Helm for the chart's tests (built the same way, into the same cache).
log "kube-apiserver, etcd and helm for the Kubernetes tests"
scripts/kube/build-apiserver.sh >/dev/null
scripts/kube/install-etcd.sh >/dev/null
scripts/kube/build-helm.sh >/dev/null
# The node suite's node: kubelet, kube-proxy, controller-manager, scheduler (same module; ~3 min on a warm
# cache), Debian's CNI plugins and the local pause image.
log "the test node's binaries, CNI plugins and pause image"
scripts/kube/build-node.sh
