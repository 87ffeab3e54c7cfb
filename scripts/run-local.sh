#!/usr/bin/env bash
# The main job on one machine, from nothing but this clone: builds what is missing, starts HAProxy 3.0 and
# the adapter (compose.yaml: the local images, host networking, loopback only), starts two stand-in vCluster
# API servers, registers two clusters through the signed webhook as kubebyon-api would, and shows each one
# answering through HAProxy by SNI. Then it keeps running, with commands to try, until Ctrl-C stops
# everything it started.
#   scripts/run-local.sh          run, and keep running
#   scripts/run-local.sh --once   the demonstration only; exits 0 when both clusters answered through HAProxy
# Ports (all on 127.0.0.1): KUBEBYON_ADAPTER_PORT (8080, webhook API and metrics), KUBEBYON_SNI_PORT (8443,
# HAProxy's SNI frontend), KUBEBYON_DEMO_NODE_PORTS ("30443 31443", the stand-ins, as NodePorts).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; }
once=false
case "${1:-}" in
  "") ;;
  --once) once=true ;;
  -h | --help) usage; exit 0 ;;
  *) echo "unknown argument: $1" >&2; usage >&2; exit 64 ;;
esac
[ $# -le 1 ] || { usage >&2; exit 64; }

adapter_port=${KUBEBYON_ADAPTER_PORT:-8080}
sni_port=${KUBEBYON_SNI_PORT:-8443}
read -r alpha_port beta_port <<<"${KUBEBYON_DEMO_NODE_PORTS:-30443 31443}"
project=${KUBEBYON_LOCAL_PROJECT:-kubebyon-local}
work=${KUBEBYON_LOCAL_DIR:-$repo/.local}
domain=kubebyon.test # reserved for testing (RFC 2606): never a real name

started=$(date +%s)
step() { printf '\n==> [%ss] %s\n' "$(($(date +%s) - started))" "$*"; }

step "bootstrap: packages, npm dependencies, Docker, Compose v2, the HAProxy and adapter images (quick once built)"
scripts/bootstrap.sh --local

for p in "$adapter_port" "$sni_port" "$alpha_port" "$beta_port"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    echo "127.0.0.1:$p is in use; choose other ports (see $0 --help)" >&2
    exit 1
  fi
done

mkdir -p "$work"
secret_file="$work/webhook-secret"
(umask 077 && openssl rand -hex 24 >"$secret_file")
export KUBEBYON_WEBHOOK_SECRET_FILE=$secret_file
export KUBEBYON_ADAPTER_URL="http://127.0.0.1:$adapter_port"
compose=(docker compose -p "$project" -f "$repo/compose.yaml")
compose_env=(env KUBEBYON_WEBHOOK_SECRET="$(cat "$secret_file")" KUBEBYON_ADAPTER_PORT="$adapter_port"
  KUBEBYON_SNI_PORT="$sni_port" KUBEBYON_RESYNC_INTERVAL_MS=10000)
standin=

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  step "stopping what this script started"
  local jobs
  jobs=$(jobs -p)
  [ -z "$jobs" ] || kill $jobs 2>/dev/null || true
  if [ -n "$standin" ]; then
    kill "$standin" 2>/dev/null || true
    wait "$standin" 2>/dev/null || true
  fi
  "${compose_env[@]}" "${compose[@]}" down --volumes --timeout 10 >/dev/null 2>&1 || true
  echo "stopped"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "starting HAProxy and the adapter (docker compose up --wait, project $project)"
"${compose_env[@]}" "${compose[@]}" down --volumes >/dev/null 2>&1 || true # leftovers of a run killed hard
if ! "${compose_env[@]}" "${compose[@]}" --progress quiet up --detach --wait --quiet-pull; then
  "${compose_env[@]}" "${compose[@]}" logs --tail 40 >&2 || true
  exit 1
fi
"${compose_env[@]}" "${compose[@]}" ps --format '  {{.Service}}: {{.Image}}, {{.Status}}'

step "starting two stand-in vCluster API servers on 127.0.0.1:$alpha_port and 127.0.0.1:$beta_port"
node scripts/demo/vcluster-standin.mjs "alpha=$alpha_port" "beta=$beta_port" >"$work/standin.log" 2>&1 &
standin=$!
for _ in $(seq 1 100); do
  [ "$(grep -c '^ready ' "$work/standin.log" || true)" = 2 ] && break
  kill -0 "$standin" 2>/dev/null || break
  sleep 0.1
done
[ "$(grep -c '^ready ' "$work/standin.log" || true)" = 2 ] || { cat "$work/standin.log" >&2; exit 1; }

step "registering clusters alpha and beta through the signed webhook, as kubebyon-api would"
for c in "alpha $alpha_port" "beta $beta_port"; do
  read -r name port <<<"$c"
  body="{\"control_plane_host\":\"api.$name.$domain\",\"public_access_mode\":\"loadbalancer\",\"node_port\":$port}"
  echo "PUT /v1/clusters/$name?wait=true $body"
  scripts/webhook.sh PUT "/v1/clusters/$name?wait=true" "$body" | sed 's/^/  -> /'
done

step "the clusters, as the adapter reports them (kubebyon-haproxy-adapter status)"
node dist/cli/main.js status

step "each cluster's API server, through HAProxy on 127.0.0.1:$sni_port (TLS passthrough, routed by SNI)"
answered=0
for c in "alpha $alpha_port" "beta $beta_port"; do
  read -r name _ <<<"$c"
  host="api.$name.$domain"
  echo "\$ curl -sk --resolve $host:$sni_port:127.0.0.1 https://$host:$sni_port/version"
  answer=$(curl -sk --max-time 10 --resolve "$host:$sni_port:127.0.0.1" "https://$host:$sni_port/version" || true)
  printf '%s\n' "${answer:-(no answer)}"
  if grep -q "\"gitVersion\":\"v1.31.0+standin-$name\"" <<<"$answer"; then answered=$((answered + 1)); fi
done
if [ "$answered" -eq 2 ]; then
  echo "both clusters answered through HAProxy"
else
  echo "only $answered of 2 clusters answered through HAProxy" >&2
  "${compose_env[@]}" "${compose[@]}" logs --tail 40 >&2 || true
  exit 1
fi
$once && exit 0

cat <<TRY

==> running. Try, in another shell (in $repo):
  export KUBEBYON_WEBHOOK_SECRET_FILE=$secret_file KUBEBYON_ADAPTER_URL=$KUBEBYON_ADAPTER_URL
  node dist/cli/main.js status                                  # clusters, states, endpoints
  scripts/webhook.sh PUT '/v1/clusters/gamma?wait=true' '{"control_plane_host":"api.gamma.$domain","public_access_mode":"loadbalancer","node_port":$alpha_port}'
  curl -sk --resolve api.gamma.$domain:$sni_port:127.0.0.1 https://api.gamma.$domain:$sni_port/version
  scripts/webhook.sh DELETE '/v1/clusters/beta?wait=true'       # beta's SNI no longer routes
  scripts/webhook.sh GET /v1/plan                               # what the next pass would change
  curl -s $KUBEBYON_ADAPTER_URL/metrics | grep '^kubebyon_'          # metrics
  docker compose -p $project exec haproxy sh -c 'cat /run/kubebyon/kubebyon.cfg'   # the file the adapter owns
Ctrl-C stops HAProxy, the adapter and the stand-ins. Logs follow.

TRY
"${compose_env[@]}" "${compose[@]}" logs --follow --no-color --since 1s 2>&1 | node scripts/demo/log-lines.mjs &
tail -n 0 --pid=$$ -f "$work/standin.log" | sed -u 's/^/standin  | /' &
wait
