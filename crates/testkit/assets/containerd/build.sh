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
mkdir -p "$dir/src" "$dir/bin"
cat > "$dir/src/go.mod" <<MOD
// Go module that builds the pinned containerd for the Verge test kit's kubelet node.
module verge.local/containerd

go 1.26.0

require github.com/containerd/containerd/v2 v$ver
MOD
cd "$dir/src"
export GOFLAGS=-mod=mod CGO_ENABLED=0
pkg=github.com/containerd/containerd/v2
ld="-s -w -X $pkg/version.Version=v$ver -X $pkg/version.Package=$pkg"
tags="no_btrfs no_devmapper no_zfs urfave_cli_no_docs osusergo netgo"

# Runs "$@" and prints a line every 10 s while it runs (go prints nothing for minutes).
progress() {
  local label=$1; shift
  local started=$SECONDS
  "$@" >&2 &
  local pid=$! n=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    n=$((n + 1))
    if [ $((n % 10)) -eq 0 ] && kill -0 "$pid" 2>/dev/null; then
      echo "verge-testkit:   $label: $((SECONDS - started)) s (total $((SECONDS / 60)) min $((SECONDS % 60)) s of ~4 min)" >&2
    fi
  done
  wait "$pid"
}

targets=(cmd/containerd cmd/containerd-shim-runc-v2 cmd/ctr)
tmp="$dir/bin.tmp"
rm -rf "$tmp"; mkdir -p "$tmp"
echo "verge-testkit: [0/${#targets[@]}] downloading modules for containerd v$ver" >&2
progress "go mod download" go mod download "$pkg" || true
i=0
for target in "${targets[@]}"; do
  i=$((i + 1))
  echo "verge-testkit: [$i/${#targets[@]}] go build $pkg/$target" >&2
  progress "go build ${target##*/}" go build -trimpath -tags "$tags" -ldflags "$ld" -o "$tmp/" "$pkg/$target"
done
mv "$tmp"/* "$dir/bin/"
rmdir "$tmp"
echo "v$ver" > "$dir/complete"
echo "verge-testkit: containerd v$ver built in $dir/bin in $((SECONDS / 60)) min $((SECONDS % 60)) s" >&2
