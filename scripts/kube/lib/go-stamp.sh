# shellcheck shell=bash
# A Go binary built from the module in the current directory is rebuilt only when its stamp changes: a hash of
# go.mod, go.sum, the Go toolchain and the build recipe (flags included), kept beside the binary.

# go_stamp RECIPE: the stamp of a build by RECIPE of this module.
go_stamp() {
  {
    cat go.mod go.sum
    go env GOVERSION GOOS GOARCH
    echo "$1"
  } | sha256sum | cut -d' ' -f1
}

# go_stamp_current OUT STAMPFILE STAMP: OUT exists and was built with STAMP (KUBEBYON_KUBE_FORCE=1: never).
go_stamp_current() {
  [ "${KUBEBYON_KUBE_FORCE:-0}" != 1 ] && [ -x "$1" ] && [ -f "$2" ] && [ "$(cat "$2")" = "$3" ]
}
