#!/usr/bin/env bash
# Builds the CNCF distribution registry (`registry serve <config.yml>`, the OCI registry Docker
# Hub's open-source server grew from) of one pinned release from the Go module proxy into
# "$1/bin/registry" (static, CGO_ENABLED=0).
# Usage: build.sh <cache-dir> <distribution-version, e.g. 3.1.2>
# The module's own cmd/registry is built in its source tree (in Go's module cache, read-only)
# with its go.mod and go.sum, so the dependency set is exactly the release's (it links every
# storage driver, S3, Azure and GCS included, which is most of the build time).
# Called by verge-testkit (crates/testkit/src/registry/build.rs); idempotent: the binary is
# moved into place once built, then the "complete" stamp is written.
set -euo pipefail
dir=$1
ver=$2
mod=github.com/distribution/distribution/v3
mkdir -p "$dir/bin"
here=$(cd "$(dirname "$0")" && pwd)
# progress(); its GOFLAGS are the other builds', replaced below.
# shellcheck source=../go-build.sh
. "$here/../go-build.sh"
expected="~3-5 min"
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"

echo "verge-testkit: [1/3] downloading $mod v$ver" >&2
src=$(cd / && go mod download -json "$mod@v$ver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$src" ] || [ ! -d "$src/cmd/registry" ]; then
  echo "build.sh: $mod v$ver has no cmd/registry (source: ${src:-none})" >&2
  exit 1
fi
cd "$src"
echo "verge-testkit: [2/3] downloading the modules cmd/registry imports" >&2
progress "go list -deps" sh -c "go list -deps ./cmd/registry >/dev/null"
tmp="$dir/bin.tmp"
rm -rf "$tmp"; mkdir -p "$tmp"
v=$mod/version
ld="-s -w -X $v.version=v$ver -X $v.revision=v$ver -X $v.mainpkg=$mod"
echo "verge-testkit: [3/3] go build $mod/cmd/registry" >&2
progress "go build registry" go build -trimpath -ldflags "$ld" -o "$tmp/registry" ./cmd/registry
mv "$tmp/registry" "$dir/bin/"
rmdir "$tmp"
echo "v$ver" > "$dir/complete"
echo "verge-testkit: distribution registry v$ver built in $dir/bin in $((SECONDS / 60)) min $((SECONDS % 60)) s" >&2
