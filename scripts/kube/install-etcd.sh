#!/usr/bin/env bash
# Puts an etcd 3.5 server binary at $KUBEBYON_KUBE_CACHE/bin/etcd (default cache /var/cache/kubebyon-kube),
# taken from Debian trixie's etcd-server package, WITHOUT touching the machine's apt state: apt runs
# with a private sources list, state and cache dir (and an empty dpkg status), only downloads the one
# .deb, and dpkg-deb -x unpacks it into the cache. Bookworm itself ships etcd 3.4, which is why trixie.
#
# Env: KUBEBYON_KUBE_CACHE     cache dir (outside the repo)
#      KUBEBYON_ETCD_SUITE     Debian suite to take etcd-server from (default trixie)
#      KUBEBYON_DEBIAN_MIRROR  Debian archive URL; default: the one the machine's own apt sources use
#      KUBEBYON_KUBE_FORCE=1   fetch again even when the binary is there
# Prints the binary's path on stdout.
set -euo pipefail

cache=${KUBEBYON_KUBE_CACHE:-/var/cache/kubebyon-kube}
suite=${KUBEBYON_ETCD_SUITE:-trixie}
bin="$cache/bin"
dir="$cache/apt-$suite"

log() { echo "[etcd-install] $*" >&2; }

if [ "${KUBEBYON_KUBE_FORCE:-0}" != 1 ] && [ -x "$bin/etcd" ] && [ -f "$bin/.etcd.stamp" ] \
  && "$bin/etcd" --version >/dev/null 2>&1; then
  log "etcd is up to date: $(cat "$bin/.etcd.stamp") ($bin/etcd)"
  echo "$bin/etcd"
  exit 0
fi

for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null 2>&1 || { log "$tool is needed (a Debian machine)"; exit 1; }
done
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || { log "debian-archive-keyring is missing"; exit 1; }

# shellcheck source=../lib/private-apt.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib/private-apt.sh"

mkdir -p "$bin" "$dir/debs"
exec 9>"$cache/.etcd.lock"
flock 9

start=$(date +%s)
log "reading the $suite package index (private apt state in $dir)"
private_apt_init "$suite" "$dir"
version=$(apt-cache "${PRIVATE_APT_OPTS[@]}" show --no-all-versions etcd-server | awk '/^Version:/ {print $2; exit}')
case "$version" in
  3.5.*) ;;
  *) log "etcd-server in $suite is '$version', expected 3.5.x"; exit 1 ;;
esac
log "downloading etcd-server $version"
rm -f "$dir"/debs/*.deb
(cd "$dir/debs" && apt-get "${PRIVATE_APT_OPTS[@]}" download -qq etcd-server)
deb=$(ls "$dir"/debs/etcd-server_*.deb)

root="$dir/root"
rm -rf "$root"
mkdir -p "$root"
dpkg-deb -x "$deb" "$root"
etcd_path="$root/usr/bin/etcd"
[ -f "$etcd_path" ] || { log "no usr/bin/etcd in $deb"; exit 1; }
install -m 0755 "$etcd_path" "$bin/etcd.tmp"
mv -f "$bin/etcd.tmp" "$bin/etcd"
rm -rf "$root"

# It must run here as it is. Debian's build is a Go binary linked only against libc (symbols up to
# GLIBC_2.34 for 3.5.16-4), which bookworm's glibc 2.36 provides, so no other file from trixie is needed.
reported=$("$bin/etcd" --version | sed -n 1p)
case "$reported" in
  *" 3.5."*) ;;
  *) log "$bin/etcd reports '$reported', expected 3.5.x"; exit 1 ;;
esac
echo "etcd-server $version from $suite" >"$bin/.etcd.stamp"
log "installed etcd-server $version in $(($(date +%s) - start))s: $reported"
echo "$bin/etcd"
