#!/usr/bin/env bash
# Builds the protobuf API tools from the Go module proxy into "$1/bin": buf (lint, breaking
# and generate) and protoc-gen-doc (docs/api.md). Static binaries (CGO_ENABLED=0), each
# module built with its own go.mod and go.sum (`go install module@version`).
# Usage: build.sh <cache-dir> <buf-version> <protoc-gen-doc-version>
# Called by verge-testkit (crates/testkit/src/proto_tools.rs); idempotent: the binaries are
# moved into place once both built, then the "complete" stamp is written.
set -euo pipefail
dir=$1
buf_ver=$2
doc_ver=$3
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../go-build.sh
. "$here/../go-build.sh"
expected="~3 min"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false"
tmp="$dir/bin.tmp"
rm -rf "$tmp"; mkdir -p "$tmp" "$dir/bin"
echo "verge-testkit: [1/2] go install github.com/bufbuild/buf/cmd/buf@v$buf_ver" >&2
GOBIN=$tmp progress "go install buf" go install -trimpath -ldflags "-s -w" \
  "github.com/bufbuild/buf/cmd/buf@v$buf_ver"
echo "verge-testkit: [2/2] go install github.com/pseudomuto/protoc-gen-doc/cmd/protoc-gen-doc@v$doc_ver" >&2
GOBIN=$tmp progress "go install protoc-gen-doc" go install -trimpath -ldflags "-s -w" \
  "github.com/pseudomuto/protoc-gen-doc/cmd/protoc-gen-doc@v$doc_ver"
mv "$tmp"/* "$dir/bin/"
rmdir "$tmp"
echo "buf v$buf_ver protoc-gen-doc v$doc_ver" > "$dir/complete"
echo "verge-testkit: buf and protoc-gen-doc built in $dir/bin in $((SECONDS / 60)) min $((SECONDS % 60)) s" >&2
