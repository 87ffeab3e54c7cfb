#!/usr/bin/env bash
# Builds a real kube-apiserver (and kubectl) from the Kubernetes release pinned in
# tools/kube-apiserver/go.mod, through the Go module proxy, as static binaries (CGO_ENABLED=0):
#   $KUBEBYON_KUBE_CACHE/bin/kube-apiserver   $KUBEBYON_KUBE_CACHE/bin/kubectl
# (KUBEBYON_KUBE_CACHE defaults to /var/cache/kubebyon-kube.) A binary is rebuilt only when its stamp
# (a hash of go.mod, go.sum, the Go version and this recipe) changed, so a second run is a no-op.
#
# Usage: scripts/kube/build-apiserver.sh [binary...]      binaries: kube-apiserver kubectl (default both),
#        and the node's kubelet kube-proxy kube-controller-manager kube-scheduler (scripts/kube/build-node.sh)
# Env:   KUBEBYON_KUBE_CACHE   cache dir (outside the repo)
#        KUBEBYON_KUBE_FORCE=1 rebuild even when the stamp matches
#        GOCACHE / GOMODCACHE  honoured as usual (Go's defaults otherwise)
# Prints the path of each binary on stdout; progress and timings go to stderr.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mod="$repo/tools/kube-apiserver"
cache=${KUBEBYON_KUBE_CACHE:-/var/cache/kubebyon-kube}
bin="$cache/bin"
binaries=("$@")
[ ${#binaries[@]} -gt 0 ] || binaries=(kube-apiserver kubectl)

log() { echo "[kube-build] $*" >&2; }

command -v go >/dev/null 2>&1 || { log "go is not on PATH (Go >= 1.24 is needed)"; exit 1; }
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if ! [ "$go_minor" -ge 24 ] 2>/dev/null; then
  log "Go >= 1.24 is needed, found $(go env GOVERSION)"
  exit 1
fi

mkdir -p "$bin"
# Serialise concurrent builds into the same cache dir.
exec 9>"$cache/.build.lock"
flock 9

cd "$mod"
kube_version=$(go list -m -mod=readonly -f '{{.Version}}' k8s.io/kubernetes)
# The release commit's time from the module proxy: a fixed build date keeps the build reproducible.
build_date=$(go list -m -mod=readonly -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)
[ -n "$build_date" ] || build_date=1970-01-01T00:00:00Z
major=$(echo "$kube_version" | sed -E 's/^v([0-9]+)\..*/\1/')
minor=$(echo "$kube_version" | sed -E 's/^v[0-9]+\.([0-9]+)\..*/\1/')

# Same version variables that Kubernetes' own build (hack/lib/version.sh) sets, so that
# `kube-apiserver --version`, /version and kubectl's version-skew checks see the real release.
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done
recipe="CGO_ENABLED=0 go build -trimpath -mod=readonly -ldflags '$ldflags'"

# shellcheck source=lib/go-stamp.sh
. "$here/lib/go-stamp.sh"
stamp=$(go_stamp "$recipe")

for name in "${binaries[@]}"; do
  case "$name" in
    kube-apiserver | kubectl | kubelet | kube-proxy | kube-controller-manager | kube-scheduler) ;;
    *) log "unknown binary $name (want kube-apiserver, kubectl, kubelet, kube-proxy, kube-controller-manager or kube-scheduler)"; exit 2 ;;
  esac
  out="$bin/$name"
  stampfile="$bin/.$name.stamp"
  if go_stamp_current "$out" "$stampfile" "$stamp"; then
    log "$name $kube_version is up to date ($out)"
    echo "$out"
    continue
  fi
  log "building $name $kube_version with $(go env GOVERSION) (CGO_ENABLED=0); this takes minutes on a cold cache"
  start=$(date +%s)
  rm -f "$stampfile"
  # -p 1: the machines have 2 cores shared with other work; one package at a time keeps them usable.
  CGO_ENABLED=0 go build -p 1 -trimpath -mod=readonly -ldflags "$ldflags" -o "$out.tmp" "k8s.io/kubernetes/cmd/$name"
  mv -f "$out.tmp" "$out"
  secs=$(($(date +%s) - start))
  # Smoke check: the binary runs and reports the pinned release.
  case "$name" in
    kubectl) reported=$("$out" version --client 2>/dev/null | sed -n 1p) ;;
    *) reported=$("$out" --version 2>/dev/null) ;;
  esac
  case "$reported" in
    *"$kube_version"*) ;;
    *) log "$out reports '$reported', expected $kube_version"; exit 1 ;;
  esac
  echo "$stamp" >"$stampfile"
  log "built $name $kube_version in ${secs}s ($(du -h "$out" | cut -f1)): $reported"
  echo "$out"
done
