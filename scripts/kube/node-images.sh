#!/usr/bin/env bash
# Puts the images the node tests run into the test node's containerd (namespace k8s.io), from the local
# docker engine (no registry is reachable; pods use imagePullPolicy: Never):
#   kubebyon/haproxy-adapter:<package version>   scripts/build-adapter-image.sh
#   kubebyon-testbed/haproxy:3.0                 scripts/build-testbed-images.sh (Debian's HAProxy)
#   kubebyon/vcluster-apiserver:<kube version>   built here: docker/vcluster on the test bed, with the
#                                                project's kube-apiserver and etcd
# An image is imported again only when docker's image ID changed. Needs node-up.sh's containerd running.
# Prints IMAGE_ADAPTER=, IMAGE_HAPROXY=, IMAGE_VCLUSTER= lines.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=lib/node-env.sh
. "$here/lib/node-env.sh"
start=$(node_now)
node_pid_alive "$NODE_DIR/pids/containerd.pid" >/dev/null || { node_log "the node is not up (scripts/kube/node-up.sh)"; exit 1; }

adapter=${KUBEBYON_ADAPTER_IMAGE:-kubebyon/haproxy-adapter:$(node -p 'require(process.argv[1]).version' "$repo/package.json")}
haproxy=kubebyon-testbed/haproxy:3.0
kube_version=$("$NODE_BIN/kube-apiserver" --version | awk '{print $2}')
vcluster=kubebyon/vcluster-apiserver:$kube_version
docker image inspect "$adapter" >/dev/null 2>&1 || "$repo/scripts/build-adapter-image.sh" >&2
docker image inspect "$haproxy" >/dev/null 2>&1 || "$repo/scripts/build-testbed-images.sh" 3.0 >&2

# The vCluster image: rebuilt when the binaries or the recipe changed.
fingerprint=$(cat "$repo/docker/vcluster/Dockerfile" "$repo/docker/vcluster/entrypoint.sh" "$NODE_BIN/.kube-apiserver.stamp" \
  "$NODE_BIN/.etcd.stamp" <(docker image inspect -f '{{.Id}}' "$haproxy") | sha256sum | cut -d' ' -f1)
if [ "$(docker image inspect -f '{{ index .Config.Labels "kubebyon.vcluster.fingerprint" }}' "$vcluster" 2>/dev/null)" != "$fingerprint" ]; then
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
  cp "$repo/docker/vcluster/Dockerfile" "$repo/docker/vcluster/entrypoint.sh" "$NODE_BIN/kube-apiserver" "$NODE_BIN/etcd" "$ctx/"
  docker build -q --build-arg "BASE=$haproxy" --label "kubebyon.vcluster.fingerprint=$fingerprint" -t "$vcluster" "$ctx" >"$ctx/build.log" 2>&1 || { cat "$ctx/build.log" >&2; exit 1; }
  node_log "built $vcluster"
fi

mkdir -p "$NODE_DIR/images"
for image in "$adapter" "$haproxy" "$vcluster"; do
  id=$(docker image inspect -f '{{.Id}}' "$image")
  stamp="$NODE_DIR/images/$(echo "$image" | tr '/:' '__').id"
  if [ "$(cat "$stamp" 2>/dev/null)" = "$id" ] && grep -qx "docker.io/$image" <<<"$(node_ctr images ls -q)"; then continue; fi
  t=$(node_now)
  docker save "$image" | node_ctr images import - >/dev/null
  echo "$id" >"$stamp"
  node_log "imported $image in $(node_elapsed "$t")s"
done
node_log "images ready in $(node_elapsed "$start")s"
printf 'IMAGE_ADAPTER=%s\nIMAGE_HAPROXY=%s\nIMAGE_VCLUSTER=%s\n' "$adapter" "$haproxy" "$vcluster"
