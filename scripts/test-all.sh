#!/usr/bin/env bash
# Runs every check and test: type check, lint, unit tests, the Kubernetes suite against a real
# kube-apiserver + etcd on loopback, the node suite on a real one-node Kubernetes (the chart, real pods),
# the integration suite against a real HAProxy 3.0, 2.6 and 3.2 (each in a local container with host
# networking), the end-to-end suite on the three versions, the ship suite (the built CLI, the adapter's image
# in compose.yaml driven through the signed webhook, and scripts/run-local.sh), the fault suite, then, when a
# Data Plane API is given, the dataplaneapi suite on 3.0, 2.6 and 3.2 and the fault suite again with the
# dataplaneapi provider. Prints one closing line "tests: N passed, N failed".
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
scripts/bootstrap.sh

export TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=localhost
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

npm run --silent typecheck
npm run --silent lint

status=0
npx vitest run --project unit --reporter=default --reporter=json --outputFile="$results/unit.json" || status=1
npx vitest run --project kubernetes --reporter=default --reporter=json --outputFile="$results/kubernetes.json" || status=1
# The runbook on a real one-node Kubernetes (scripts/kube/node-up.sh; torn down after): the chart installed
# with helm, a vCluster pod reached through HAProxy by SNI, real pods deleted and upgraded. About 6 minutes.
echo "== node suite: the runbook on a real one-node Kubernetes"
npx vitest run --project node --reporter=default --reporter=json --outputFile="$results/node.json" || status=1
for v in 3.0 2.6 3.2; do
  echo "== integration suite against HAProxy $v"
  KUBEBYON_TEST_HAPROXY_VERSION=$v npx vitest run --project integration \
    --reporter=default --reporter=json --outputFile="$results/integration-$v.json" || status=1
done
# End to end: the built service (npm run build in the suite's setup) as its own process, against HAProxy
# 3.0, 2.6 and 3.2 with the haproxy provider, a real kube-apiserver for the Kubernetes cases.
for v in 3.0 2.6 3.2; do
  echo "== end-to-end suite against HAProxy $v"
  KUBEBYON_TEST_HAPROXY_VERSION=$v npx vitest run --project e2e \
    --reporter=default --reporter=json --outputFile="$results/e2e-$v.json" || status=1
done
echo "== ship suite: the built CLI, the image in compose.yaml, run-local.sh"
npx vitest run --project ship --reporter=default --reporter=json --outputFile="$results/ship.json" || status=1

# The Data Plane API suite runs when one is given (a binary layered onto the test bed, or an image that
# bundles it); no registry serves it, so without either it is skipped and says so.
dpapi_results=()
if [ -n "${KUBEBYON_TEST_DATAPLANEAPI_BIN:-}${KUBEBYON_TEST_DATAPLANEAPI_IMAGE:-}" ]; then
  for v in 3.0 2.6 3.2; do
    echo "== dataplaneapi suite against HAProxy $v"
    KUBEBYON_TEST_HAPROXY_VERSION=$v npx vitest run --project dataplaneapi \
      --reporter=default --reporter=json --outputFile="$results/dataplaneapi-$v.json" || status=1
    dpapi_results+=("$results/dataplaneapi-$v.json")
  done
else
  echo "dataplaneapi suite skipped: set KUBEBYON_TEST_DATAPLANEAPI_BIN (a dataplaneapi binary) or KUBEBYON_TEST_DATAPLANEAPI_IMAGE"
fi

# Faults (kill -9, HAProxy away, a full or read-only state folder, kube-apiserver down, a failed reload)
# against the service as it ships (dist/, its own process) and a stock HAProxy 3.0; about 4 minutes.
echo "== fault suite against HAProxy 3.0 (stock-HAProxy provider)"
KUBEBYON_TEST_HAPROXY_VERSION=3.0 npx vitest run --project faults \
  --reporter=default --reporter=json --outputFile="$results/faults.json" || status=1
# The provider-dependent faults (kill -9, the API away or HAProxy restarted, a failed reload) once more with
# the Data Plane API provider, when one is given; the provider-independent ones are skipped in that run.
if [ -n "${KUBEBYON_TEST_DATAPLANEAPI_BIN:-}${KUBEBYON_TEST_DATAPLANEAPI_IMAGE:-}" ]; then
  echo "== fault suite against HAProxy 3.0 (Data Plane API provider)"
  KUBEBYON_TEST_FAULTS_PROVIDER=dataplaneapi KUBEBYON_TEST_HAPROXY_VERSION=3.0 npx vitest run --project faults \
    --reporter=default --reporter=json --outputFile="$results/faults-dataplaneapi.json" || status=1
  dpapi_results+=("$results/faults-dataplaneapi.json")
else
  echo "fault suite with the dataplaneapi provider skipped: set KUBEBYON_TEST_DATAPLANEAPI_BIN or KUBEBYON_TEST_DATAPLANEAPI_IMAGE"
fi

node scripts/lib/count-results.mjs "$results/unit.json" "$results/kubernetes.json" "$results/node.json" "$results/integration-3.0.json" \
  "$results/integration-2.6.json" "$results/integration-3.2.json" "$results/e2e-3.0.json" "$results/e2e-2.6.json" \
  "$results/e2e-3.2.json" "$results/ship.json" \
  "$results/faults.json" ${dpapi_results[@]+"${dpapi_results[@]}"}
exit $status
