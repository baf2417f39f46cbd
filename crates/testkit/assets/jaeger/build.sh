#!/usr/bin/env bash
# Builds the Jaeger v1 all-in-one (collector with the OTLP receivers, query service and UI
# server, in-memory storage) of one pinned Jaeger release from the Go module proxy into
# "$1/bin/jaeger-all-in-one" (static, CGO_ENABLED=0).
# Usage: build.sh <cache-dir> <jaeger-version, e.g. 1.76.0>
# The module is built in its own source tree (in Go's module cache, read-only) with its own
# go.mod and go.sum, so the dependency set is exactly the release's. The module carries only a
# placeholder page for the UI (the React UI is a separate build), so the binary serves the HTTP
# query API and that placeholder.
# Called by verge-testkit (crates/testkit/src/jaeger/build.rs); idempotent: the binary is moved
# into place once built, then the "complete" stamp is written.
set -euo pipefail
dir=$1
ver=$2
mod=github.com/jaegertracing/jaeger
mkdir -p "$dir/bin"
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"

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
      echo "verge-testkit:   $label: $((SECONDS - started)) s (total $((SECONDS / 60)) min $((SECONDS % 60)) s of ~5-9 min)" >&2
    fi
  done
  wait "$pid"
}

echo "verge-testkit: [1/3] downloading $mod v$ver" >&2
src=$(cd / && go mod download -json "$mod@v$ver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$src" ] || [ ! -d "$src/cmd/all-in-one" ]; then
  echo "build.sh: $mod v$ver has no cmd/all-in-one (source: ${src:-none})" >&2
  exit 1
fi
cd "$src"
echo "verge-testkit: [2/3] downloading the modules all-in-one imports" >&2
progress "go list -deps" sh -c "go list -deps ./cmd/all-in-one >/dev/null"
tmp="$dir/bin.tmp"
rm -rf "$tmp"; mkdir -p "$tmp"
v=$mod/internal/version
ld="-s -w -X $v.latestVersion=v$ver -X $v.commitSHA=v$ver -X $v.date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "verge-testkit: [3/3] go build $mod/cmd/all-in-one" >&2
progress "go build all-in-one" go build -trimpath -ldflags "$ld" -o "$tmp/jaeger-all-in-one" ./cmd/all-in-one
mv "$tmp/jaeger-all-in-one" "$dir/bin/"
rmdir "$tmp"
echo "v$ver" > "$dir/complete"
echo "verge-testkit: Jaeger v$ver built in $dir/bin in $((SECONDS / 60)) min $((SECONDS % 60)) s" >&2
