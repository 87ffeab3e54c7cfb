#!/usr/bin/env bash
# Builds the local HAProxy test-bed images, one per HAProxy version, from Debian's packages only:
#   kubebyon-testbed/haproxy:3.0  (Debian trixie)      kubebyon-testbed/haproxy:2.6  (Debian bookworm)
#   kubebyon-testbed/haproxy:3.2  (Debian forky, HAProxy 3.2 LTS)
# No registry is reachable, so each image is a root fs assembled here and built `FROM scratch` with COPY only.
# The package closure is resolved by apt against an empty dpkg status, in a private apt state directory per
# suite, so the machine itself is never upgraded. Downloads are cached under $KUBEBYON_TESTBED_CACHE.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cache=${KUBEBYON_TESTBED_CACHE:-/var/cache/kubebyon-testbed}
versions=${1:-"3.0 2.6 3.2"}

log() { echo "[testbed-images] $*" >&2; }

suite_for() {
  case "$1" in
    3.0) echo trixie ;;
    2.6) echo bookworm ;;
    # Debian testing: its haproxy (3.2.x) needs that suite's libc and OpenSSL, which its closure brings along
    # (the image's root fs is all forky; nothing of the machine's bookworm ends up in it).
    3.2) echo forky ;;
    *) log "unknown HAProxy version $1 (want 3.0, 2.6 or 3.2)"; exit 2 ;;
  esac
}

# shellcheck source=lib/private-apt.sh
. "$here/lib/private-apt.sh"

fetch_packages() {
  local suite=$1 dir=$2
  private_apt_init "$suite" "$dir"
  # With an empty dpkg status apt resolves the whole dependency closure (libc included) and only downloads it.
  rm -f "$dir"/cache/archives/*.deb
  apt-get "${PRIVATE_APT_OPTS[@]}" install -y -qq --download-only haproxy busybox-static >/dev/null
}

build_rootfs() {
  local dir=$1 root=$2
  rm -rf "$root"
  mkdir -p "$root"
  for deb in "$dir"/cache/archives/*.deb; do
    dpkg-deb -x "$deb" "$root"
  done
  # Debian ships merged /usr: recreate the top-level links that dpkg-deb -x does not make.
  for d in bin sbin lib lib64; do
    if [ -d "$root/usr/$d" ] && [ ! -e "$root/$d" ]; then ln -s "usr/$d" "$root/$d"; fi
  done
  mkdir -p "$root/tmp" "$root/run/haproxy" "$root/var/lib/haproxy" "$root/etc/haproxy" "$root/etc/kubebyon"
  chmod 1777 "$root/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\nhaproxy:x:99:99:haproxy:/var/lib/haproxy:/bin/false\n' >"$root/etc/passwd"
  printf 'root:x:0:\nhaproxy:x:99:\n' >"$root/etc/group"
  # busybox-static provides the shell that the reload and health commands use.
  [ -e "$root/bin/sh" ] || ln -s /bin/busybox "$root/bin/sh"
  cp "$repo/docker/testbed/entrypoint.sh" "$root/entrypoint.sh"
  chmod 755 "$root/entrypoint.sh"
  # Ensure the binary actually runs inside this root (catches a missing library or loader early).
  chroot "$root" /usr/sbin/haproxy -v | sed -n 1p >&2
  chroot "$root" /bin/sh -c 'test -x /entrypoint.sh'
}

for v in $versions; do
  suite=$(suite_for "$v")
  dir="$cache/$suite"
  tag="kubebyon-testbed/haproxy:$v"
  fingerprint=$(cat "$repo/docker/testbed/Dockerfile" "$repo/docker/testbed/entrypoint.sh" "$0" | sha256sum | cut -c1-16)
  if docker image inspect "$tag" --format '{{ index .Config.Labels "kubebyon.testbed.fingerprint" }}' 2>/dev/null \
    | grep -qx "$fingerprint"; then
    log "$tag is up to date"
    continue
  fi
  start=$(date +%s)
  log "fetching $suite packages"
  fetch_packages "$suite" "$dir"
  root="$cache/rootfs-$v"
  build_rootfs "$dir" "$root"
  log "building $tag"
  tar -C "$root" -c . | gzip -1 >"$cache/rootfs-$v.tar.gz"
  ctx=$(mktemp -d)
  mv "$cache/rootfs-$v.tar.gz" "$ctx/rootfs.tar.gz"
  cp "$repo/docker/testbed/Dockerfile" "$ctx/Dockerfile"
  docker build -q --label "kubebyon.testbed.fingerprint=$fingerprint" -t "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
  log "$tag built in $(( $(date +%s) - start ))s"
done
