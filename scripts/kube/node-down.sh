#!/usr/bin/env bash
# Tears down the test node that node-up.sh started and gives the host back as it was:
#   - every pod's processes (through the node's own containerd), then every component, each by the PID
#     node-up.sh recorded (never by name); shims left behind are found by the node's own socket path;
#   - the pods' network namespaces and every mount under the node's dir;
#   - iptables: kube-proxy's chains (kube-proxy --cleanup) and kubelet's KUBE-FIREWALL, KUBE-KUBELET-CANARY,
#     KUBE-IPTABLES-HINT, in IPv4 and IPv6 (any KUBE-* chain left, and the rules jumping to them);
#   - the sysctls kubelet and kube-proxy set (kernel.panic, kernel.panic_on_oops, vm.overcommit_memory,
#     net.ipv4.conf.all.route_localnet), back to the values recorded before the first node-up.sh;
#   - the /kubepods cgroups under every controller, the bridge, and the fixed paths kubelet and CNI write
#     whatever their configuration (/var/lib/kubelet, /var/lib/cni, /var/log/containers, /var/log/pods) when
#     they did not exist before.
# Safe to run when nothing is up. Env: KUBEBYON_NODE_DIR; KUBEBYON_NODE_KEEP_LOGS=<dir> copies the logs there.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/node-env.sh
. "$here/lib/node-env.sh"
D=$NODE_DIR
start=$(node_now)
[ "$(id -u)" = 0 ] || { node_log "must run as root"; exit 1; }
[ -d "$D" ] || { node_log "nothing to tear down ($D does not exist)"; exit 0; }

# A zombie has exited; it answers `kill -0` until its parent reaps it.
is_zombie() { [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]; }

stop_pid() {
  local name=$1 pid i t
  t=$(node_now)
  pid=$(node_pid_alive "$D/pids/$name.pid") || { rm -f "$D/pids/$name.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null
  # Gone, or a zombie: its parent is PID 1 (node-up.sh has exited), which may reap it only later.
  for i in $(seq 1 100); do
    is_zombie "$pid" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  # Only a live process is killed: a zombie has already stopped.
  if kill -0 "$pid" 2>/dev/null && ! is_zombie "$pid"; then
    node_log "$name ($pid) did not stop in 10s; killing it"
    kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$D/pids/$name.pid"
  node_log "stopped $name in $(node_elapsed "$t")s"
}

# --- pods ---------------------------------------------------------------------------------------------------
# kubelet first, so that it restarts nothing; then every container through our containerd.
stop_pid kubelet
netns=()
if node_pid_alive "$D/pids/containerd.pid" >/dev/null; then
  for id in $(node_ctr containers ls -q 2>/dev/null); do
    ns=$(node_ctr containers info "$id" 2>/dev/null | awk '/"type": "network"/ {getline; if ($0 ~ /"path"/) {gsub(/[",]/, "", $2); print $2}}')
    case "$ns" in /run/netns/cni-* | /var/run/netns/cni-*) netns+=("$ns") ;; esac
  done
  for id in $(node_ctr tasks ls -q 2>/dev/null); do node_ctr tasks kill -s SIGKILL "$id" >/dev/null 2>&1; done
  for i in $(seq 1 50); do
    running=$(node_ctr tasks ls 2>/dev/null | awk 'NR > 1 && $3 == "RUNNING"' | wc -l)
    [ "$running" = 0 ] && break
    sleep 0.1
  done
  for id in $(node_ctr tasks ls -q 2>/dev/null); do node_ctr tasks delete -f "$id" >/dev/null 2>&1; done
  for id in $(node_ctr containers ls -q 2>/dev/null); do node_ctr containers delete "$id" >/dev/null 2>&1; done
fi
stop_pid containerd
node_log "pods and containerd stopped after $(node_elapsed "$start")s"
# Shims outlive containerd by design: ours are the ones started with our socket's address.
for p in /proc/[0-9]*; do
  cmdline=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
  if [[ "$cmdline" == *"-address $NODE_SOCK "* ]]; then
    kill -KILL "${p#/proc/}" 2>/dev/null && node_log "killed a leftover shim (pid ${p#/proc/})"
  fi
done
for ns in ${netns[@]+"${netns[@]}"}; do
  umount "$ns" 2>/dev/null
  rm -f "$ns"
done

# --- iptables -------------------------------------------------------------------------------------------------
stop_pid kube-proxy
[ -x "$NODE_BIN/kube-proxy" ] && [ -f "$D/kube-proxy.yaml" ] \
  && "$NODE_BIN/kube-proxy" --cleanup --config="$D/kube-proxy.yaml" >>"$D/logs/kube-proxy-cleanup.log" 2>&1
for ipt in iptables ip6tables; do
  for table in filter nat mangle; do
    # Rules in the other chains that jump to a KUBE-* chain, then the KUBE-* chains themselves.
    "$ipt" -t "$table" -S 2>/dev/null | grep -E -- '-j KUBE-' | grep -vE '^-A KUBE-' | sed 's/^-A /-D /' |
      while read -r rule; do eval "$ipt -t $table $rule" 2>/dev/null; done
    chains=$("$ipt" -t "$table" -S 2>/dev/null | awk '/^-N KUBE-/ {print $2}')
    for c in $chains; do "$ipt" -t "$table" -F "$c" 2>/dev/null; done
    for c in $chains; do "$ipt" -t "$table" -X "$c" 2>/dev/null; done
  done
done

node_log "iptables restored after $(node_elapsed "$start")s"
# --- the control plane ------------------------------------------------------------------------------------------
for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_pid "$c"; done

node_log "control plane stopped after $(node_elapsed "$start")s"
# --- mounts, cgroups, sysctls, links, fixed paths ---------------------------------------------------------------
findmnt -rn -o TARGET | grep -E "^($D|/var/lib/kubelet)/" | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
for root in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
  [ -d "${root}kubepods" ] || continue
  find "${root}kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null
  [ -d "${root}kubepods" ] && node_log "could not remove ${root}kubepods (a process is still in it?)"
done
if [ -f "$D/host.orig" ]; then
  while read -r kind a b; do
    case "$kind" in
      sysctl) sysctl -qw "$a=$b" ;;
    esac
  done <"$D/host.orig"
  for p in /var/lib/kubelet /var/lib/cni /var/log/containers /var/log/pods /etc/cni /opt/cni; do
    grep -qx "existed $p" "$D/host.orig" || rm -rf "$p"
  done
fi
ip link show "$NODE_BRIDGE" >/dev/null 2>&1 && ip link del "$NODE_BRIDGE"

if [ -n "${KUBEBYON_NODE_KEEP_LOGS:-}" ]; then
  mkdir -p "$KUBEBYON_NODE_KEEP_LOGS"
  cp -r "$D/logs/." "$KUBEBYON_NODE_KEEP_LOGS/" 2>/dev/null
fi
left=$(findmnt -rn -o TARGET | grep -c "^$D/")
if [ "$left" -gt 0 ]; then
  node_log "$left mounts are still under $D; leaving the dir"
  exit 1
fi
node_log "mounts, cgroups, sysctls, links and paths restored after $(node_elapsed "$start")s"
rm -rf "$D"
node_log "node torn down in $(node_elapsed "$start")s"
