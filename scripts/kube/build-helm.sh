#!/usr/bin/env bash
# Builds Helm (helm.sh/helm/v3) from the release pinned in tools/helm/go.mod, through the Go module proxy, as a
# static binary (CGO_ENABLED=0) beside the kube binaries: $KUBEBYON_KUBE_CACHE/bin/helm
# (KUBEBYON_KUBE_CACHE defaults to /var/cache/kubebyon-kube). Rebuilt only when its stamp (a hash of go.mod,
# go.sum, the Go version and this recipe) changed, so a second run is a no-op.
#
# Usage: scripts/kube/build-helm.sh
# Env:   KUBEBYON_KUBE_CACHE   cache dir (outside the repo)
#        KUBEBYON_KUBE_FORCE=1 rebuild even when the stamp matches
#        GOCACHE / GOMODCACHE  honoured as usual (Go's defaults otherwise)
# Prints the binary's path on stdout; progress and timings go to stderr.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mod="$repo/tools/helm"
cache=${KUBEBYON_KUBE_CACHE:-/var/cache/kubebyon-kube}
bin="$cache/bin"

log() { echo "[helm-build] $*" >&2; }

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then export PATH="$PATH:/usr/local/go/bin"; fi
command -v go >/dev/null 2>&1 || { log "go is not on PATH"; exit 1; }
cd "$mod"
# Helm's release states the Go it needs (the go line of tools/helm/go.mod follows it).
need_minor=$(sed -nE 's/^go 1\.([0-9]+).*/\1/p' go.mod)
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if ! [ "$go_minor" -ge "$need_minor" ] 2>/dev/null; then
  log "Go >= 1.$need_minor is needed, found $(go env GOVERSION)"
  exit 1
fi

mkdir -p "$bin"
# Same lock as build-apiserver.sh: builds into one cache dir run one at a time (2 cores).
exec 9>"$cache/.build.lock"
flock 9

helm_version=$(go list -m -mod=readonly -f '{{.Version}}' helm.sh/helm/v3)
# What Helm's own Makefile stamps in: its version (a release: no "unreleased" metadata) and the Kubernetes
# version of the client-go it was built with (the default of .Capabilities.KubeVersion in `helm template`).
k8s_minor=$(go list -m -mod=readonly -f '{{.Version}}' k8s.io/client-go | sed -E 's/^v0\.([0-9]+)\..*/\1/')
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
ldflags+=" -X helm.sh/helm/v3/internal/version.metadata= -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done
recipe="CGO_ENABLED=0 go build -p 1 -trimpath -mod=readonly -ldflags '$ldflags'"

# shellcheck source=lib/go-stamp.sh
. "$here/lib/go-stamp.sh"
stamp=$(go_stamp "$recipe")

out="$bin/helm"
stampfile="$bin/.helm.stamp"
if go_stamp_current "$out" "$stampfile" "$stamp"; then
  log "helm $helm_version is up to date ($out)"
  echo "$out"
  exit 0
fi
log "building helm $helm_version with $(go env GOVERSION) (CGO_ENABLED=0, -p 1); minutes on a cold cache"
start=$(date +%s)
rm -f "$stampfile"
CGO_ENABLED=0 go build -p 1 -trimpath -mod=readonly -ldflags "$ldflags" -o "$out.tmp" helm.sh/helm/v3/cmd/helm
mv -f "$out.tmp" "$out"
secs=$(($(date +%s) - start))
# Smoke check: the binary runs and reports the pinned release.
reported=$("$out" version --short)
case "$reported" in
  "$helm_version"*) ;;
  *) log "$out reports '$reported', expected $helm_version"; exit 1 ;;
esac
echo "$stamp" >"$stampfile"
log "built helm $helm_version in ${secs}s ($(du -h "$out" | cut -f1)): $reported"
echo "$out"
