# Sourced by scripts that take packages from a Debian suite other than the machine's (or an empty
# dpkg status), without touching the machine's apt state.
#
#   private_apt_init SUITE DIR   sets the array PRIVATE_APT_OPTS (for apt-get and apt-cache) so that the
#                                sources list, package lists, cache and dpkg status all live under DIR,
#                                with SUITE and SUITE-security as sources, then reads the package lists.
#
# The archive addresses are the ones the machine's own apt sources use (no host is written here);
# KUBEBYON_DEBIAN_MIRROR and KUBEBYON_DEBIAN_SECURITY_MIRROR override them.

# Prints the first URI among the machine's apt sources whose path ends in /$1 (deb822 or one-line form).
_apt_source_uri() {
  {
    cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}'
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | sed -E 's/\[[^]]*\]//' | awk '/^deb / {print $2}'
  } | awk -v want="$1" '{ u = $0; sub(/\/$/, "", u); n = split(u, parts, "/"); if (parts[n] == want) { print u; exit } }'
}

private_apt_init() {
  local suite=$1 dir=$2
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  local mirror=${KUBEBYON_DEBIAN_MIRROR:-$(_apt_source_uri debian)}
  local security=${KUBEBYON_DEBIAN_SECURITY_MIRROR:-$(_apt_source_uri debian-security)}
  if [ -z "$mirror" ]; then
    echo "no Debian archive found in the apt sources; set KUBEBYON_DEBIAN_MIRROR" >&2
    return 1
  fi
  mkdir -p "$dir/state/lists/partial" "$dir/cache/archives/partial"
  : >"$dir/state/status"
  {
    echo "deb [signed-by=$keyring] $mirror $suite main"
    [ -z "$security" ] || echo "deb [signed-by=$keyring] $security $suite-security main"
  } >"$dir/sources.list"
  PRIVATE_APT_OPTS=(
    -o "Dir::Etc::sourcelist=$dir/sources.list" -o Dir::Etc::sourceparts=-
    -o "Dir::State=$dir/state" -o "Dir::State::status=$dir/state/status"
    -o "Dir::Cache=$dir/cache" -o "Dir::Cache::archives=$dir/cache/archives"
    -o Debug::NoLocking=true -o APT::Install-Recommends=false -o APT::Sandbox::User=root
  )
  apt-get "${PRIVATE_APT_OPTS[@]}" update -qq
}
