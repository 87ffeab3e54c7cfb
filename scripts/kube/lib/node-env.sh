# Sourced by the node scripts (node-up.sh, node-down.sh, node-images.sh): one place for the test node's
# fixed names, addresses and paths. Every address is in 198.18.0.0/15 (the benchmarking range), so nothing
# the node does can reach another network; see ../../shared/notes or scripts/kube/README.md.
NODE_CACHE=${KUBEBYON_KUBE_CACHE:-/var/cache/kubebyon-kube}
NODE_BIN="$NODE_CACHE/bin"
NODE_CNI_BIN="$NODE_CACHE/cni/bin"
NODE_DIR=${KUBEBYON_NODE_DIR:-/var/lib/kubebyon-node}
NODE_NAME=kubebyon-node
NODE_BRIDGE=kubebyon0
# The node address lives on the bridge: the kernel here has no dummy links, and loopback cannot be a node IP.
NODE_IP=198.18.0.1
NODE_POD_CIDR=198.18.0.0/24
NODE_SERVICE_CIDR=198.18.16.0/24
NODE_API_PORT=6443
NODE_API_URL="https://$NODE_IP:$NODE_API_PORT"
NODE_SOCK="$NODE_DIR/run/containerd.sock"
NODE_PAUSE_IMAGE=docker.io/kubebyon/pause:0.1
NODE_KUBECONFIG="$NODE_DIR/pki/admin.kubeconfig"

node_log() { echo "[kube-node] $*" >&2; }
node_now() { date +%s.%N; }
node_elapsed() { awk -v a="$1" -v b="$(node_now)" 'BEGIN { printf "%.1f", b - a }'; }
node_ctr() { ctr --address "$NODE_SOCK" --namespace k8s.io "$@"; }
node_kubectl() { "$NODE_BIN/kubectl" --kubeconfig "$NODE_KUBECONFIG" "$@"; }
# A PID file's process, if it is still the one we started (its command line names our node dir or binary).
node_pid_alive() {
  local file=$1 pid
  [ -f "$file" ] || return 1
  pid=$(cat "$file")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  # Captured first: with pipefail, grep -q closing the pipe early could make a live process look dead.
  local cmdline
  cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
  case "$cmdline" in *"$NODE_DIR"* | *"$NODE_BIN"*) ;; *) return 1 ;; esac
  echo "$pid"
}
