#!/usr/bin/env bash
# Builds containerd, containerd-shim-runc-v2 and ctr of one pinned containerd release from the Go
# module proxy into "$1/bin" (static, CGO_ENABLED=0; the btrfs, devmapper and zfs snapshotters,
# which need cgo or host tools, are left out).
# Usage: build.sh <cache-dir> <containerd-version, e.g. 2.4.2>
# Called by verge-testkit (crates/testkit/src/kubelet_node/build.rs); idempotent: the binaries are
# moved into place only once all of them built, then the "complete" stamp is written.
set -euo pipefail
dir=$1
ver=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir/src" "$dir/bin"
cat > "$dir/src/go.mod" <<MOD
// Go module that builds the pinned containerd for the Verge test kit's kubelet node.
module verge.local/containerd

go 1.26.0

require github.com/containerd/containerd/v2 v$ver
MOD
cd "$dir/src"
pkg=github.com/containerd/containerd/v2
ld="-s -w -X $pkg/version.Version=v$ver -X $pkg/version.Package=$pkg"
tags="no_btrfs no_devmapper no_zfs urfave_cli_no_docs osusergo netgo"
what=containerd stamp=complete tmp="$dir/bin.tmp" expected="~4 min"
targets=("$pkg/cmd/containerd" "$pkg/cmd/containerd-shim-runc-v2" "$pkg/cmd/ctr")
# shellcheck source=../go-build.sh
. "$here/../go-build.sh"
go_build_all "$pkg"
