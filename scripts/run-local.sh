#!/usr/bin/env bash
# The service's main job on a self-contained local default: a real HAProxy 3.0 in a local container
# (host networking, loopback only), and the adapter's dry run for examples/clusters.json against it.
# Stops with Ctrl-C (the container is removed). Applying the plan needs HAProxy's Data Plane API,
# which this project cannot build yet (see docs/ARCHITECTURE.md, "Status").
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
scripts/bootstrap.sh
npm run --silent build

name=kubebyon-local-haproxy
state=${KUBEBYON_LOCAL_STATE_DIR:-$repo/.local-haproxy}
clusters=${1:-examples/clusters.json}
bind=${KUBEBYON_HAPROXY_BIND_ADDR:-127.0.0.1:8443}
mkdir -p "$state"
cp docker/local/haproxy.cfg "$state/haproxy.cfg"
docker rm -f "$name" >/dev/null 2>&1 || true
docker run -d --name "$name" --label kubebyon.local=true --network host \
  -v "$state:/etc/kubebyon" kubebyon-testbed/haproxy:3.0 >/dev/null
trap 'docker rm -f "$name" >/dev/null 2>&1 || true' EXIT

for _ in $(seq 1 50); do
  docker logs "$name" 2>&1 | grep -q 'Loading success' && break
  sleep 0.2
done
docker logs "$name" 2>&1 | grep -q 'Loading success' || { docker logs "$name"; exit 1; }

version=$(docker exec "$name" /usr/sbin/haproxy -v | sed -n 1p)
cat <<INFO
HAProxy is running (container $name, host network):
  version:        $version
  configuration:  $state/haproxy.cfg
  runtime API:    $state/admin.sock   (HAProxy's runtime API, level admin)
  master CLI:     $state/master.sock

Dry run of the adapter for $clusters (bind $bind):
INFO
KUBEBYON_HAPROXY_BIND_ADDR=$bind node dist/cli/main.js render "$clusters"
echo
echo "HAProxy keeps running until Ctrl-C."
docker logs -f "$name" 2>&1 | sed 's/^/[haproxy] /'
