#!/usr/bin/env bash
# Runs a real etcd + kube-apiserver on loopback for tests, with RBAC authorization and static-token
# authentication, and keeps them running until this script gets SIGINT/SIGTERM (or one of them dies).
# On exit both processes are stopped and the run dir is removed.
#
# Once /readyz answers ok it prints KEY=value lines on stdout (also written to $RUN_DIR/env):
#   KUBE_APISERVER_URL  https://127.0.0.1:<port>         KUBE_CA_FILE  CA of the serving cert
#   KUBE_ADMIN_TOKEN    user kubebyon-admin, group system:masters (full access)
#   KUBE_ADAPTER_TOKEN  user $KUBE_ADAPTER_USER, no permissions until a (Cluster)RoleBinding grants some
#   KUBECONFIG          kubeconfig with contexts "admin" (current) and "adapter"
#   KUBE_ETCD_URL, KUBE_RUN_DIR, KUBE_APISERVER_PID, KUBE_ETCD_PID
# A harness can set KUBEBYON_KUBE_RUN_DIR and wait for $KUBEBYON_KUBE_RUN_DIR/env to appear.
# SIGUSR1 stops kube-apiserver and SIGUSR2 starts it again (etcd keeps the data);
# $RUN_DIR/apiserver.state says "down" or "up" (up = /readyz ok). KUBE_APISERVER_PID is then stale.
# Stop it with SIGTERM (Ctrl-C works in a terminal, but a script started with `&` from another
# non-interactive shell ignores SIGINT, which bash then cannot trap).
# If a harness may SIGKILL this script, start it as a process-group leader (setsid, or Node's
# spawn(..., {detached: true})) and kill the whole group, so that etcd and kube-apiserver go too.
#
# Env (all optional; set the ports and dir to run several side by side, defaults are free ports/mktemp):
#   KUBEBYON_APISERVER_PORT, KUBEBYON_ETCD_CLIENT_PORT, KUBEBYON_ETCD_PEER_PORT
#   KUBEBYON_KUBE_RUN_DIR     work dir (certs, tokens, etcd data, logs); removed on exit unless KUBEBYON_KUBE_KEEP=1
#   KUBEBYON_ADMIN_TOKEN, KUBEBYON_ADAPTER_TOKEN   default: random
#   KUBEBYON_ADAPTER_USER     default system:serviceaccount:kube-system:kubebyon-haproxy-adapter
#   KUBEBYON_APISERVER_BIN, KUBEBYON_ETCD_BIN      default: build/install into $KUBEBYON_KUBE_CACHE (no-op when cached)
#   KUBEBYON_KUBE_READY_TIMEOUT  seconds to wait for readiness (default 120)
#   KUBEBYON_APISERVER_ARGS   extra kube-apiserver flags (word-split)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
timeout=${KUBEBYON_KUBE_READY_TIMEOUT:-120}
adapter_user=${KUBEBYON_ADAPTER_USER:-system:serviceaccount:kube-system:kubebyon-haproxy-adapter}

log() { echo "[kube-run] $*" >&2; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

for tool in openssl curl; do
  command -v "$tool" >/dev/null 2>&1 || { log "$tool is needed"; exit 1; }
done

apiserver_bin=${KUBEBYON_APISERVER_BIN:-}
[ -n "$apiserver_bin" ] || apiserver_bin=$("$here/build-apiserver.sh" kube-apiserver)
etcd_bin=${KUBEBYON_ETCD_BIN:-}
[ -n "$etcd_bin" ] || etcd_bin=$("$here/install-etcd.sh")

# Work dir and cleanup. Everything started below is stopped by the trap, whatever the exit path.
if [ -n "${KUBEBYON_KUBE_RUN_DIR:-}" ]; then
  run=$KUBEBYON_KUBE_RUN_DIR
  mkdir -p "$run"
  rm -f "$run/env"
else
  run=$(mktemp -d "${TMPDIR:-/tmp}/kubebyon-kube.XXXXXX")
fi
run=$(cd "$run" && pwd)
etcd_pid=
api_pid=
stop() {
  local pid=$1 name=$2 i
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name ($pid) did not stop in 10s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$?
  # A second signal must not cut the cleanup short and leave etcd or kube-apiserver behind.
  trap '' INT TERM HUP USR1 USR2
  trap - EXIT
  stop "$api_pid" kube-apiserver
  stop "$etcd_pid" etcd
  if [ "${KUBEBYON_KUBE_KEEP:-0}" = 1 ]; then
    log "kept $run"
  else
    rm -rf "$run"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
pending=
trap 'pending=down' USR1
trap 'pending=up' USR2

# Free loopback ports: bound together (so they differ) and released just before use.
free_ports() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
  else
    node -e '
const net = require("net"); const n = Number(process.argv[1]); const ports = []; const servers = [];
const next = () => { if (ports.length === n) { console.log(ports.join(" ")); servers.forEach(s => s.close()); return; }
  const s = net.createServer().listen(0, "127.0.0.1", () => { ports.push(s.address().port); servers.push(s); next(); }); };
next();' "$1"
  fi
}
read -r p1 p2 p3 < <(free_ports 3)
api_port=${KUBEBYON_APISERVER_PORT:-$p1}
etcd_client_port=${KUBEBYON_ETCD_CLIENT_PORT:-$p2}
etcd_peer_port=${KUBEBYON_ETCD_PEER_PORT:-$p3}
api_url="https://127.0.0.1:$api_port"
etcd_url="http://127.0.0.1:$etcd_client_port"
# Only loopback is ever contacted; keep any proxy settings out of the way.
curl_opts=(--silent --show-error --max-time 5 --noproxy '*')

start=$(now)

# --- certificates and keys ------------------------------------------------------------------
pki="$run/pki"
mkdir -p "$pki"
(
  cd "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout ca.key -out ca.crt \
    -subj "/CN=kubebyon-test-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
  # 10.96.0.1 is the first IP of the service range below: a SAN only, nothing is ever sent there.
  printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1" \
    "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" >apiserver.ext
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile apiserver.ext -out apiserver.crt 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  chmod 600 ca.key apiserver.key sa.key
)

# --- static tokens ----------------------------------------------------------------------------
admin_token=${KUBEBYON_ADMIN_TOKEN:-$(openssl rand -hex 24)}
adapter_token=${KUBEBYON_ADAPTER_TOKEN:-$(openssl rand -hex 24)}
adapter_ns=$(echo "$adapter_user" | awk -F: '$1 == "system" && $2 == "serviceaccount" {print $3}')
adapter_groups=
[ -z "$adapter_ns" ] || adapter_groups="system:serviceaccounts,system:serviceaccounts:$adapter_ns"
# token,user,uid,"group1,group2"
{
  echo "$admin_token,kubebyon-admin,kubebyon-admin,\"system:masters\""
  echo "$adapter_token,$adapter_user,kubebyon-adapter,\"$adapter_groups\""
} >"$pki/tokens.csv"
chmod 600 "$pki/tokens.csv"

# --- etcd ---------------------------------------------------------------------------------------
mkdir -p "$run/etcd"
chmod 700 "$run/etcd"
"$etcd_bin" --name kubebyon --data-dir "$run/etcd" \
  --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
  --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster "kubebyon=http://127.0.0.1:$etcd_peer_port" --initial-cluster-state new \
  --unsafe-no-fsync --log-level warn >"$run/etcd.log" 2>&1 &
etcd_pid=$!

etcd_healthy() { curl "${curl_opts[@]}" "$etcd_url/health" 2>/dev/null | grep -q '"health":"true"'; }
# shellcheck source=lib/wait-ready.sh
. "$here/lib/wait-ready.sh"
wait_ready log etcd "$etcd_pid" "$run/etcd.log" "$timeout" etcd_healthy
log "etcd healthy on $etcd_url after $(elapsed "$start")s"

# --- kube-apiserver -----------------------------------------------------------------------------
# --shutdown-watch-termination-grace-period: without it an open watch holds a graceful shutdown
# (SIGTERM) for the full 60 s request timeout; with it kube-apiserver exits in about a second.
start_apiserver() {
  # shellcheck disable=SC2086
  "$apiserver_bin" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
    --etcd-servers="$etcd_url" \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" --cert-dir="$pki" \
    --authorization-mode=RBAC --token-auth-file="$pki/tokens.csv" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 \
    --endpoint-reconciler-type=none \
    --profiling=false \
    --shutdown-watch-termination-grace-period=2s \
    ${KUBEBYON_APISERVER_ARGS:-} >>"$run/kube-apiserver.log" 2>&1 &
  api_pid=$!
}
# Waits until /readyz says ok; exits the script if kube-apiserver dies or the deadline passes.
wait_apiserver_ready() {
  local deadline=$1
  until [ "$(curl "${curl_opts[@]}" --cacert "$pki/ca.crt" -H "Authorization: Bearer $admin_token" \
    "$api_url/readyz" 2>/dev/null)" = ok ]; do
    if ! kill -0 "$api_pid" 2>/dev/null; then
      log "kube-apiserver exited early; its log:"
      tail -n 40 "$run/kube-apiserver.log" >&2
      exit 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "kube-apiserver not ready after ${timeout}s; /readyz says:"
      curl "${curl_opts[@]}" --cacert "$pki/ca.crt" -H "Authorization: Bearer $admin_token" "$api_url/readyz?verbose" >&2 || true
      tail -n 40 "$run/kube-apiserver.log" >&2
      exit 1
    fi
    sleep 0.2
  done
}
set_state() {
  echo "$1" >"$run/apiserver.state.tmp"
  mv "$run/apiserver.state.tmp" "$run/apiserver.state"
}

: >"$run/kube-apiserver.log"
start_apiserver
wait_apiserver_ready $(($(date +%s) + timeout))
set_state up
ready_secs=$(elapsed "$start")

# --- kubeconfig ---------------------------------------------------------------------------------
ca_b64=$(base64 -w0 <"$pki/ca.crt")
cat >"$run/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kubebyon-test
  cluster:
    server: $api_url
    certificate-authority-data: $ca_b64
users:
- name: admin
  user:
    token: $admin_token
- name: adapter
  user:
    token: $adapter_token
contexts:
- name: admin
  context: {cluster: kubebyon-test, user: admin}
- name: adapter
  context: {cluster: kubebyon-test, user: adapter}
current-context: admin
EOF
chmod 600 "$run/kubeconfig"

env_text="KUBE_APISERVER_URL=$api_url
KUBE_CA_FILE=$pki/ca.crt
KUBE_ADMIN_TOKEN=$admin_token
KUBE_ADAPTER_TOKEN=$adapter_token
KUBE_ADAPTER_USER=$adapter_user
KUBECONFIG=$run/kubeconfig
KUBE_ETCD_URL=$etcd_url
KUBE_RUN_DIR=$run
KUBE_APISERVER_PID=$api_pid
KUBE_ETCD_PID=$etcd_pid"
log "kube-apiserver $("$apiserver_bin" --version | awk '{print $2}') ready on $api_url in ${ready_secs}s (etcd $etcd_url, dir $run)"
printf '%s\n' "$env_text"
# Written last and atomically: a harness waiting for the file never reads half of it.
printf '%s\n' "$env_text" >"$run/env.tmp"
mv "$run/env.tmp" "$run/env"

# --- run until stopped ---------------------------------------------------------------------------
# SIGUSR1 stops kube-apiserver (etcd and its data stay) and SIGUSR2 starts it again on the same port,
# so tests can see the API server go away and come back; $RUN_DIR/apiserver.state then says down/up.
# The signals are only noted in the traps; this loop acts on them (within 0.2 s).
api_up=1
while :; do
  case "$pending" in
    down)
      pending=
      if [ "$api_up" = 1 ]; then
        stop "$api_pid" kube-apiserver
        api_pid=
        api_up=0
        set_state down
        log "kube-apiserver stopped (SIGUSR1); SIGUSR2 starts it again"
      fi
      ;;
    up)
      pending=
      if [ "$api_up" = 0 ]; then
        t=$(now)
        start_apiserver
        wait_apiserver_ready $(($(date +%s) + timeout))
        api_up=1
        set_state up
        log "kube-apiserver ready again in $(elapsed "$t")s (SIGUSR2), pid $api_pid"
      fi
      ;;
  esac
  if ! kill -0 "$etcd_pid" 2>/dev/null; then
    log "etcd exited; its log:"
    tail -n 20 "$run/etcd.log" >&2
    exit 1
  fi
  if [ "$api_up" = 1 ] && ! kill -0 "$api_pid" 2>/dev/null; then
    log "kube-apiserver exited; its log:"
    tail -n 20 "$run/kube-apiserver.log" >&2
    exit 1
  fi
  sleep 0.2
done
