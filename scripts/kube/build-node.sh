#!/usr/bin/env bash
# Builds what the one-node test cluster (node-up.sh) needs beside kube-apiserver, kubectl and etcd, each
# cached in $KUBEBYON_KUBE_CACHE and skipped when up to date:
#   bin/kubelet bin/kube-proxy bin/kube-controller-manager bin/kube-scheduler
#       from the same Go module and release as kube-apiserver (tools/kube-apiserver, see build-apiserver.sh);
#       v1.34 is pinned because it still runs on this VM's cgroup v1 and Debian bookworm's containerd 1.6,
#       both deprecated later.
#   cni/bin/*      Debian bookworm's containernetworking-plugins (apt-get download + dpkg-deb -x; not installed)
#   images/pause.tar   the pod sandbox image: tools/pause built as a static binary, in a docker-archive tar
# containerd and runc are Debian's, which docker.io already brings (the node runs its own containerd).
# Usage: scripts/kube/build-node.sh        Env: KUBEBYON_KUBE_CACHE, KUBEBYON_KUBE_FORCE=1
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=lib/node-env.sh
. "$here/lib/node-env.sh"
log() { echo "[kube-node-build] $*" >&2; }
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then export PATH="$PATH:/usr/local/go/bin"; fi

"$here/build-apiserver.sh" kubelet kube-proxy kube-controller-manager kube-scheduler >/dev/null

for tool in containerd containerd-shim-runc-v2 runc ctr iptables ip6tables; do
  command -v "$tool" >/dev/null 2>&1 || { log "$tool is needed (Debian's containerd and runc come with docker.io)"; exit 1; }
done

# --- CNI plugins ------------------------------------------------------------------------------------------
cni_stamp="$NODE_CACHE/cni/.stamp"
if [ "${KUBEBYON_KUBE_FORCE:-0}" = 1 ] || [ ! -x "$NODE_CNI_BIN/bridge" ] || [ ! -f "$cni_stamp" ]; then
  start=$(date +%s)
  work="$NODE_CACHE/cni/work"
  rm -rf "$work" "$NODE_CACHE/cni/bin"
  mkdir -p "$work" "$NODE_CNI_BIN"
  (cd "$work" && apt-get -o APT::Sandbox::User=root download -qq containernetworking-plugins)
  deb=$(ls "$work"/containernetworking-plugins_*.deb)
  dpkg-deb -x "$deb" "$work/root"
  for p in bridge host-local loopback portmap; do
    install -m 0755 "$work/root/usr/lib/cni/$p" "$NODE_CNI_BIN/$p"
  done
  basename "$deb" >"$cni_stamp"
  rm -rf "$work"
  log "CNI plugins from $(cat "$cni_stamp") in $(($(date +%s) - start))s"
else
  log "CNI plugins are up to date ($(cat "$cni_stamp"))"
fi

# --- pause image ------------------------------------------------------------------------------------------
pause_stamp=$(cat "$repo/tools/pause/main.go" "$repo/tools/pause/go.mod" <(go env GOVERSION) <(echo "$NODE_PAUSE_IMAGE") | sha256sum | cut -d' ' -f1)
images="$NODE_CACHE/images"
if [ "${KUBEBYON_KUBE_FORCE:-0}" = 1 ] || [ ! -f "$images/pause.tar" ] || [ "$(cat "$images/.pause.stamp" 2>/dev/null)" != "$pause_stamp" ]; then
  command -v docker >/dev/null 2>&1 || { log "docker is needed to build the pause image"; exit 1; }
  mkdir -p "$images"
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
  (cd "$repo/tools/pause" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$ctx/pause" .)
  printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$ctx/Dockerfile"
  docker build -q -t "$NODE_PAUSE_IMAGE" "$ctx" >"$ctx/build.log" 2>&1 || { cat "$ctx/build.log" >&2; exit 1; }
  docker save -o "$images/pause.tar.tmp" "$NODE_PAUSE_IMAGE"
  mv -f "$images/pause.tar.tmp" "$images/pause.tar"
  echo "$pause_stamp" >"$images/.pause.stamp"
  log "pause image $NODE_PAUSE_IMAGE built ($(du -h "$images/pause.tar" | cut -f1))"
else
  log "pause image is up to date"
fi
