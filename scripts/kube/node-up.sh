#!/usr/bin/env bash
# Brings up a real one-node Kubernetes (v1.34, see build-node.sh) on this machine, for the node test suite:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a containerd of its own with CRI, kubelet and
# kube-proxy (iptables). Idempotent: a component already running is left alone, so a second run only
# waits for the node to be Ready and prints the same lines.
#
# Addresses (all in 198.18.0.0/15; nothing leaves the machine):
#   the bridge kubebyon0 carries the node address 198.18.0.1/24; pods get 198.18.0.10-250 on it, with no
#   default route (only the service range, through the node) and no masquerade; services 198.18.16.0/24;
#   NodePorts answer on the node address and loopback only; every component listens on the node address.
# Everything lives in $KUBEBYON_NODE_DIR (default /var/lib/kubebyon-node); node-down.sh undoes it all,
# including what kubelet and kube-proxy change on the host (sysctls, iptables chains, cgroups, fixed paths).
#
# Prints KEY=value lines on stdout when the node is Ready (also in $NODE_DIR/env):
#   KUBECONFIG (admin), KUBE_APISERVER_URL, KUBE_NODE_NAME, KUBE_NODE_IP, KUBE_NODE_DIR, KUBE_NODE_UP_SECONDS
# Usage: scripts/kube/node-up.sh   Env: KUBEBYON_NODE_DIR, KUBEBYON_KUBE_CACHE, KUBEBYON_NODE_READY_TIMEOUT (120)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/node-env.sh
. "$here/lib/node-env.sh"
timeout=${KUBEBYON_NODE_READY_TIMEOUT:-120}
start=$(node_now)
[ "$(id -u)" = 0 ] || { node_log "must run as root"; exit 1; }

"$here/build-apiserver.sh" >/dev/null
"$here/install-etcd.sh" >/dev/null
"$here/build-node.sh"

D=$NODE_DIR
mkdir -p "$D"/{pki,run,logs,pids,containerd,kubelet,cni/net.d,cni/ipam,etcd,pod-logs,volume-plugins}
chmod 700 "$D/etcd"
exec 8>"$D/.lock"
flock 8

# --- what the host had before (once: a second run must not record the node's own values) ----------------
sysctls="kernel.panic kernel.panic_on_oops vm.overcommit_memory net.ipv4.conf.all.route_localnet net.ipv4.ip_forward"
if [ ! -f "$D/host.orig" ]; then
  {
    for s in $sysctls; do echo "sysctl $s $(sysctl -n "$s")"; done
    for p in /var/lib/kubelet /var/lib/cni /var/log/containers /var/log/pods /etc/cni /opt/cni; do
      [ -e "$p" ] && echo "existed $p"
    done
  } >"$D/host.orig.tmp"
  mv "$D/host.orig.tmp" "$D/host.orig"
fi
sysctl -qw net.ipv4.ip_forward=1

# --- the bridge with the node address ---------------------------------------------------------------------
if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
  ip link add "$NODE_BRIDGE" type bridge
fi
case "$(ip -4 addr show dev "$NODE_BRIDGE")" in *"inet $NODE_IP/24 "*) ;; *) ip addr add "$NODE_IP/24" dev "$NODE_BRIDGE" ;; esac
ip link set "$NODE_BRIDGE" up

# --- certificates, tokens, kubeconfigs (kept across runs) -------------------------------------------------
pki="$D/pki"
if [ ! -f "$pki/done" ]; then
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout ca.key -out ca.crt -subj "/CN=kubebyon-node-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    # The first service IP (198.18.16.1) is the kubernetes Service that pods use.
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
    printf '%s\n' "subjectAltName=IP:$NODE_IP,IP:198.18.16.1,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
      "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    # kube-apiserver's client certificate towards kubelet (logs, exec, port-forward).
    openssl req -newkey rsa:2048 -nodes -keyout kubelet-client.key -out kubelet-client.csr \
      -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" 2>/dev/null
    printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=clientAuth" >client.ext
    openssl x509 -req -in kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile client.ext -out kubelet-client.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    # Static tokens: the components are in system:masters (a test node; RBAC only, no Node authorizer).
    {
      echo "$(openssl rand -hex 24),kubebyon-admin,kubebyon-admin,\"system:masters\""
      echo "$(openssl rand -hex 24),system:node:$NODE_NAME,kubelet,\"system:nodes,system:masters\""
      echo "$(openssl rand -hex 24),system:kube-controller-manager,kcm,\"system:masters\""
      echo "$(openssl rand -hex 24),system:kube-scheduler,sched,\"system:masters\""
      echo "$(openssl rand -hex 24),system:kube-proxy,kube-proxy,\"system:masters\""
    } >tokens.csv
    ca_b64=$(base64 -w0 <ca.crt)
    for pair in admin:kubebyon-admin "kubelet:system:node:$NODE_NAME" controller-manager:system:kube-controller-manager \
      scheduler:system:kube-scheduler kube-proxy:system:kube-proxy; do
      file=${pair%%:*}.kubeconfig
      token=$(awk -F, -v u="${pair#*:}" '$2 == u {print $1}' tokens.csv)
      cat >"$file" <<KC
apiVersion: v1
kind: Config
clusters:
- name: kubebyon-node
  cluster: {server: "$NODE_API_URL", certificate-authority-data: $ca_b64}
users:
- name: u
  user: {token: $token}
contexts:
- name: kubebyon-node
  context: {cluster: kubebyon-node, user: u}
current-context: kubebyon-node
KC
    done
    chmod 600 ./*.key tokens.csv ./*.kubeconfig
    touch done
  )
fi

# --- configuration files ----------------------------------------------------------------------------------
# Written only when they change: kube-proxy exits when its file is rewritten, even with the same content.
write_if_changed() {
  local file=$1
  cat >"$file.new"
  if cmp -s "$file.new" "$file"; then rm -f "$file.new"; else mv -f "$file.new" "$file"; fi
}
# containerd: its own root, state, socket and runc root; never docker's. This VM's root lacks CAP_SYS_RESOURCE,
# so no process may lower an oom_score_adj: restrict_oom_score_adj here and oomScoreAdj 0 in kubelet.
write_if_changed "$D/containerd/config.toml" <<EOF
version = 2
root = "$D/containerd/root"
state = "$D/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$NODE_SOCK"
[ttrpc]
  address = "$NODE_SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$D/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$NODE_PAUSE_IMAGE"
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$D/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$NODE_CNI_BIN"
    conf_dir = "$D/cni/net.d"
EOF
# Pods: on the bridge, a route to the service range only (no default route), no masquerade.
write_if_changed "$D/cni/net.d/10-kubebyon.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "kubebyon",
  "plugins": [
    {
      "type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": true, "isDefaultGateway": false,
      "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$D/cni/ipam",
        "ranges": [[{"subnet": "$NODE_POD_CIDR", "gateway": "$NODE_IP", "rangeStart": "198.18.0.10", "rangeEnd": "198.18.0.250"}]],
        "routes": [{"dst": "$NODE_SERVICE_CIDR"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
# No DNS server runs on the node: pods get a resolv.conf that points nowhere outside.
printf 'nameserver 127.0.0.1\noptions ndots:1 attempts:1 timeout:1\n' | write_if_changed "$D/resolv.conf"
write_if_changed "$D/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: $NODE_IP
healthzPort: 10248
containerRuntimeEndpoint: unix://$NODE_SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
resolvConf: $D/resolv.conf
podLogsDir: $D/pod-logs
volumePluginDir: $D/volume-plugins
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 60
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 10s
EOF
write_if_changed "$D/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $pki/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: $NODE_IP:10256
metricsBindAddress: $NODE_IP:10249
clusterCIDR: $NODE_POD_CIDR
nodePortAddresses: ["$NODE_IP/32", "127.0.0.1/32"]
# 0: leave the kernel's conntrack settings alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: true, syncPeriod: 30s, minSyncPeriod: 0s}
EOF

# --- processes --------------------------------------------------------------------------------------------
# Each runs in its own session (setsid) with its log in $D/logs; its PID goes to $D/pids. A component that
# is already running (its PID alive and still ours) is not started again.
launch() {
  local name=$1
  shift
  if node_pid_alive "$D/pids/$name.pid" >/dev/null; then return 0; fi
  # 8>&-: the lock stays with this script, not with the daemons it leaves running.
  setsid "$@" </dev/null >>"$D/logs/$name.log" 2>&1 8>&- &
  echo $! >"$D/pids/$name.pid"
  node_log "started $name (pid $!)"
}
# shellcheck source=lib/wait-ready.sh
. "$here/lib/wait-ready.sh"
wait_for() {
  local what=$1 name=$2 pid='' i
  shift 2
  # Right after `launch` the child may not have run its program yet: until it does, its command line is this
  # script's and `node_pid_alive` refuses it (containerd, once, with both cores busy). Up to 10 s while it lives.
  for i in $(seq 100); do
    pid=$(node_pid_alive "$D/pids/$name.pid") && break
    kill -0 "$(cat "$D/pids/$name.pid")" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$pid" ] || { node_log "$name is not running"; exit 1; }
  wait_ready node_log "$what" "$pid" "$D/logs/$name.log" "$timeout" "$@"
}
curl_api() { curl --silent --fail --max-time 5 --noproxy '*' --cacert "$pki/ca.crt" "$@"; }
admin_token=$(awk -F, '$2 == "kubebyon-admin" {print $1}' "$pki/tokens.csv")

launch etcd "$NODE_BIN/etcd" --name kubebyon-node --data-dir "$D/etcd" \
  --listen-client-urls "http://$NODE_IP:2379" --advertise-client-urls "http://$NODE_IP:2379" \
  --listen-peer-urls "http://$NODE_IP:2380" --initial-advertise-peer-urls "http://$NODE_IP:2380" \
  --initial-cluster "kubebyon-node=http://$NODE_IP:2380" \
  --unsafe-no-fsync --log-level warn
wait_for etcd etcd sh -c "curl --silent --max-time 2 --noproxy '*' http://$NODE_IP:2379/health | grep -q '\"health\":\"true\"'"

# Kubelets are reached at their InternalIP only: a node's name would be looked up in the machine's DNS.
launch kube-apiserver "$NODE_BIN/kube-apiserver" \
  --bind-address="$NODE_IP" --advertise-address="$NODE_IP" --secure-port="$NODE_API_PORT" \
  --etcd-servers="http://$NODE_IP:2379" \
  --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" --cert-dir="$pki" \
  --client-ca-file="$pki/ca.crt" \
  --kubelet-client-certificate="$pki/kubelet-client.crt" --kubelet-client-key="$pki/kubelet-client.key" \
  --kubelet-preferred-address-types=InternalIP \
  --authorization-mode=RBAC --token-auth-file="$pki/tokens.csv" --allow-privileged=true \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
  --service-cluster-ip-range="$NODE_SERVICE_CIDR" \
  --profiling=false --shutdown-watch-termination-grace-period=2s
wait_for kube-apiserver kube-apiserver sh -c "[ \"\$(curl --silent --max-time 5 --noproxy '*' --cacert '$pki/ca.crt' -H 'Authorization: Bearer $admin_token' $NODE_API_URL/readyz)\" = ok ]"

launch kube-controller-manager "$NODE_BIN/kube-controller-manager" \
  --kubeconfig="$pki/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$pki/controller-manager.kubeconfig" --authorization-kubeconfig="$pki/controller-manager.kubeconfig" \
  --bind-address="$NODE_IP" --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
  --controllers='*,-nodeipam,-csrsigning,-bootstrapsigner,-tokencleaner,-csrapproving,-csrcleaner' \
  --profiling=false
launch kube-scheduler "$NODE_BIN/kube-scheduler" \
  --kubeconfig="$pki/scheduler.kubeconfig" \
  --authentication-kubeconfig="$pki/scheduler.kubeconfig" --authorization-kubeconfig="$pki/scheduler.kubeconfig" \
  --bind-address="$NODE_IP" --leader-elect=false --profiling=false

launch containerd containerd --config "$D/containerd/config.toml"
wait_for containerd containerd node_ctr version
if ! grep -qx "$NODE_PAUSE_IMAGE" <<<"$(node_ctr images ls -q)"; then
  node_ctr images import "$NODE_CACHE/images/pause.tar" >/dev/null
fi

launch kubelet "$NODE_BIN/kubelet" --config="$D/kubelet/config.yaml" --kubeconfig="$pki/kubelet.kubeconfig" \
  --root-dir="$D/kubelet" --cert-dir="$D/kubelet/pki" --node-ip="$NODE_IP" --hostname-override="$NODE_NAME" \
  --v=1
launch kube-proxy "$NODE_BIN/kube-proxy" --config="$D/kube-proxy.yaml" --v=1

node_ready() {
  [ "$(node_kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
wait_for "node $NODE_NAME Ready" kubelet node_ready
# Pods need their ServiceAccount: the controller-manager makes "default" in each namespace.
wait_for "ServiceAccount default/default" kube-controller-manager node_kubectl get serviceaccount default -n default
wait_for "kube-proxy's rules" kube-proxy sh -c "iptables -t nat -S KUBE-SERVICES | grep -q default/kubernetes"

up_secs=$(node_elapsed "$start")
env_text="KUBECONFIG=$NODE_KUBECONFIG
KUBE_APISERVER_URL=$NODE_API_URL
KUBE_NODE_NAME=$NODE_NAME
KUBE_NODE_IP=$NODE_IP
KUBE_NODE_DIR=$D
KUBE_NODE_UP_SECONDS=$up_secs"
printf '%s\n' "$env_text" >"$D/env.tmp"
mv "$D/env.tmp" "$D/env"
node_log "node $NODE_NAME Ready at $NODE_IP in ${up_secs}s (dir $D)"
printf '%s\n' "$env_text"
