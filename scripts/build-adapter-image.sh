#!/usr/bin/env bash
# Builds the adapter's image, kubebyon/haproxy-adapter:<package version>, with no registry: a root fs
# assembled from Debian trixie's packages (nodejs 20.19 and its libraries; haproxy for the stock provider's
# `haproxy -c`), the built dist/ and the production node_modules, then `FROM scratch` + ADD.
# Skipped when an image with the same fingerprint (this script, docker/adapter/, the lock file, dist/) exists.
# Downloads are cached under $KUBEBYON_ADAPTER_CACHE.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
cache=${KUBEBYON_ADAPTER_CACHE:-/var/cache/kubebyon-adapter}
version=$(node -p 'require("./package.json").version')
tag=${KUBEBYON_ADAPTER_IMAGE:-kubebyon/haproxy-adapter:$version}
uid=10001

log() { echo "[adapter-image] $*" >&2; }

# shellcheck source=lib/private-apt.sh
. "$here/lib/private-apt.sh"

log "building dist/"
rm -rf dist
npm run --silent build

fingerprint=$(
  {
    cat "$0" docker/adapter/* package.json package-lock.json
    find dist -type f | LC_ALL=C sort | xargs cat
  } | sha256sum | cut -c1-16
)
if docker image inspect "$tag" --format '{{ index .Config.Labels "kubebyon.adapter.fingerprint" }}' 2>/dev/null \
  | grep -qx "$fingerprint"; then
  log "$tag is up to date"
  exit 0
fi
start=$(date +%s)
mkdir -p "$cache"

# Production dependencies, installed once per lock file.
lock=$(sha256sum package-lock.json | cut -c1-16)
modules="$cache/node_modules-$lock"
if [ ! -d "$modules/node_modules" ]; then
  log "installing production node_modules (npm ci --omit=dev)"
  rm -rf "$modules.tmp"
  mkdir -p "$modules.tmp"
  cp package.json package-lock.json "$modules.tmp/"
  (cd "$modules.tmp" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error)
  rm -rf "$modules"
  mv "$modules.tmp" "$modules"
fi

# Debian packages: apt resolves the whole closure against an empty dpkg status and only downloads it.
apt_dir="$cache/trixie"
log "fetching Debian trixie's nodejs, haproxy and ca-certificates"
private_apt_init trixie "$apt_dir"
rm -f "$apt_dir"/cache/archives/*.deb
apt-get "${PRIVATE_APT_OPTS[@]}" install -y -qq --download-only nodejs haproxy ca-certificates >/dev/null

root="$cache/rootfs"
rm -rf "$root"
mkdir -p "$root"
for deb in "$apt_dir"/cache/archives/*.deb; do
  dpkg-deb -x "$deb" "$root"
done
# Debian ships merged /usr: recreate the top-level links that dpkg-deb -x does not make.
for d in bin sbin lib lib64; do
  if [ -d "$root/usr/$d" ] && [ ! -e "$root/$d" ]; then ln -s "usr/$d" "$root/$d"; fi
done
# The CA bundle Debian's node reads, as update-ca-certificates would make it (maintainer scripts never run here).
mkdir -p "$root/etc/ssl/certs"
cat "$root"/usr/share/ca-certificates/mozilla/*.crt >"$root/etc/ssl/certs/ca-certificates.crt"
# Nothing in the image reads documentation, manuals or translations.
rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,bug} "$root"/etc/{init.d,logrotate.d,rsyslog.d}
mkdir -p "$root/tmp" "$root/app" "$root/var/lib/kubebyon-haproxy-adapter" "$root/etc/haproxy"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nkubebyon:x:%s:%s:kubebyon:/app:/usr/sbin/nologin\n' \
  "$uid" "$uid" >"$root/etc/passwd"
printf 'root:x:0:\nkubebyon:x:%s:\n' "$uid" >"$root/etc/group"
cp -r dist package.json "$root/app/"
cp -r "$modules/node_modules" "$root/app/node_modules"
# Type declarations, source maps and docs are never loaded at run time (a third of node_modules).
find "$root/app" \( -name '*.map' -o -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.md' \) -delete
cp docker/adapter/healthcheck.mjs "$root/app/healthcheck.mjs"
chown "$uid:$uid" "$root/var/lib/kubebyon-haproxy-adapter"
# The image must run: node with its libraries and Debian's unbundled modules, the CLI, and haproxy.
chroot "$root" /usr/bin/node --version >&2
chroot "$root" /usr/bin/node /app/dist/cli/main.js --help >/dev/null
chroot "$root" /usr/bin/node -e 'if (typeof fetch !== "function") process.exit(1)'
chroot "$root" /usr/sbin/haproxy -v | sed -n 1p >&2

log "building $tag"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
tar -C "$root" -c . | gzip -1 >"$ctx/rootfs.tar.gz"
cp docker/adapter/Dockerfile "$ctx/Dockerfile"
# The legacy builder's deprecation notice is noise: show docker's output only when the build fails.
docker build -q --label "kubebyon.adapter.fingerprint=$fingerprint" -t "$tag" "$ctx" >"$ctx/build.log" 2>&1 \
  || { cat "$ctx/build.log" >&2; exit 1; }
rm -rf "$root"
size=$(docker image inspect "$tag" --format '{{.Size}}')
log "$tag built in $(($(date +%s) - start))s, $((size / 1000000)) MB"
