#!/usr/bin/env bash
# Builds metrics-server (sigs.k8s.io/metrics-server/cmd/metrics-server) of one pinned release
# from the Go module proxy into "$1/bin/metrics-server" (static, CGO_ENABLED=0), as its
# Makefile does (-trimpath, the client-go version variables set to the release).
# Usage: build.sh <cache-dir> <version, e.g. 0.8.0>
# The module is built in its own source tree (in Go's module cache, read-only) with its own
# go.mod and go.sum, so the dependency set is exactly the release's.
# Called by verge-testkit (crates/testkit/src/metrics_server/build.rs); idempotent: the binary
# is moved into place once built, then the "complete" stamp is written.
set -euo pipefail
dir=$1
ver=$2
mod=sigs.k8s.io/metrics-server
mkdir -p "$dir/bin"
here=$(cd "$(dirname "$0")" && pwd)
# progress(); its GOFLAGS are the other builds', replaced below.
# shellcheck source=../go-build.sh
. "$here/../go-build.sh"
expected="~3-4 min"
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"

echo "verge-testkit: [1/3] downloading $mod v$ver" >&2
src=$(cd / && go mod download -json "$mod@v$ver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$src" ] || [ ! -d "$src/cmd/metrics-server" ]; then
  echo "build.sh: $mod v$ver has no cmd/metrics-server (source: ${src:-none})" >&2
  exit 1
fi
cd "$src"
echo "verge-testkit: [2/3] downloading the modules metrics-server imports" >&2
progress "go list -deps" sh -c "go list -deps ./cmd/metrics-server >/dev/null"
tmp="$dir/bin.tmp"
rm -rf "$tmp"; mkdir -p "$tmp"
v=k8s.io/client-go/pkg/version
ld="-s -w -X $v.gitVersion=v$ver -X $v.gitCommit=v$ver -X $v.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "verge-testkit: [3/3] go build $mod/cmd/metrics-server" >&2
progress "go build metrics-server" go build -trimpath -ldflags "$ld" -o "$tmp/metrics-server" ./cmd/metrics-server
mv "$tmp/metrics-server" "$dir/bin/"
# The release's manifests, which the kit applies through an overlay (metrics_server/deploy.rs).
rm -rf "$dir/manifests"; mkdir -p "$dir/manifests"
cp -r manifests/base "$dir/manifests/base"
chmod -R u+w "$dir/manifests"
rmdir "$tmp"
echo "v$ver" > "$dir/complete"
echo "verge-testkit: metrics-server v$ver built in $dir/bin in $((SECONDS / 60)) min $((SECONDS % 60)) s" >&2
