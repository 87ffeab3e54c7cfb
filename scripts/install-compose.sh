#!/usr/bin/env bash
# Makes `docker compose` (Compose v2) available: Debian bookworm's docker-compose is 1.29, which has no
# `up --wait`, so the plugin comes from trixie's docker-compose package (2.26, a Go binary that needs only
# libc), fetched through a private apt state and put where the docker CLI looks for plugins. The machine's
# apt and dpkg state are not touched.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${KUBEBYON_COMPOSE_CACHE:-/var/cache/kubebyon-compose}
plugins=${KUBEBYON_DOCKER_PLUGIN_DIR:-/usr/local/lib/docker/cli-plugins}

log() { echo "[install-compose] $*" >&2; }

if docker compose version --short 2>/dev/null | grep -q '^v\?2\.'; then
  exit 0
fi

# shellcheck source=lib/private-apt.sh
. "$here/lib/private-apt.sh"
log "fetching docker-compose (Compose v2) from Debian trixie"
private_apt_init trixie "$cache/apt"
rm -f "$cache"/apt/cache/archives/*.deb
apt-get "${PRIVATE_APT_OPTS[@]}" install -y -qq --download-only --no-install-recommends docker-compose >/dev/null
rm -rf "$cache/root"
dpkg-deb -x "$cache"/apt/cache/archives/docker-compose_*.deb "$cache/root"
mkdir -p "$plugins"
install -m 755 "$cache/root/usr/libexec/docker/cli-plugins/docker-compose" "$plugins/docker-compose"
rm -rf "$cache/root"
log "installed $(docker compose version)"
