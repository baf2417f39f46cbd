#!/usr/bin/env bash
# Builds the Go virtual mapper into "$1/bin/go-virtual-mapper": copies the Go sources into
# "$1/src", generates the DMI code there from Verge's proto/dmi/v1beta1/api.proto with
# protoc-gen-go and protoc-gen-go-grpc (pinned below, installed with `go install` into
# "$GO_MAPPER_TOOLS" or "$1/tools"), and runs `go build`. The generated code is never
# written into the repository.
# Usage: PROTOC=<protoc> PROTOC_INCLUDE=<dir with google/protobuf/any.proto> build.sh <out-dir>
# Called by verge-testkit (crates/testkit/src/go_mapper.rs), which passes the protoc of the
# protoc-bin-vendored crate; a system protoc with its include directory works as well.
set -euo pipefail
out=$1
: "${PROTOC:?PROTOC must name a protoc binary}"
here=$(cd "$(dirname "$0")" && pwd)
protos=$(cd "$here/../../proto" && pwd)
tools=${GO_MAPPER_TOOLS:-$out/tools}
module=verge.invalid/mappers/go-virtual
export GOTOOLCHAIN=local CGO_ENABLED=0

# The generator versions (the Go module proxy serves them; `go install` builds them).
PROTOC_GEN_GO=google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC=google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2

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
      echo "verge-testkit:   $label: $((SECONDS - started)) s (total $SECONDS s)" >&2
    fi
  done
  wait "$pid"
}

mkdir -p "$tools"
stamp="$tools/versions"
if [ "$(cat "$stamp" 2>/dev/null)" != "$PROTOC_GEN_GO $PROTOC_GEN_GO_GRPC" ] \
  || [ ! -x "$tools/protoc-gen-go" ] || [ ! -x "$tools/protoc-gen-go-grpc" ]; then
  echo "verge-testkit: [1/3] go install $PROTOC_GEN_GO $PROTOC_GEN_GO_GRPC" >&2
  GOBIN=$tools progress "go install protoc-gen-go" go install "$PROTOC_GEN_GO"
  GOBIN=$tools progress "go install protoc-gen-go-grpc" go install "$PROTOC_GEN_GO_GRPC"
  echo "$PROTOC_GEN_GO $PROTOC_GEN_GO_GRPC" > "$stamp"
fi

echo "verge-testkit: [2/3] protoc dmi/v1beta1/api.proto -> Go" >&2
rm -rf "$out/src"
mkdir -p "$out/src" "$out/bin"
cp "$here"/go.mod "$here"/go.sum "$here"/*.go "$out/src/"
includes=(-I "$protos")
if [ -n "${PROTOC_INCLUDE:-}" ]; then includes+=(-I "$PROTOC_INCLUDE"); fi
"$PROTOC" "${includes[@]}" \
  --plugin=protoc-gen-go="$tools/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$tools/protoc-gen-go-grpc" \
  --go_out="$out/src" --go_opt=module=$module \
  --go_opt=Mdmi/v1beta1/api.proto=$module/dmi/v1beta1 \
  --go-grpc_out="$out/src" --go-grpc_opt=module=$module \
  --go-grpc_opt=Mdmi/v1beta1/api.proto=$module/dmi/v1beta1 \
  dmi/v1beta1/api.proto

echo "verge-testkit: [3/3] go build go-virtual-mapper" >&2
cd "$out/src"
progress "go build" go build -trimpath -ldflags "-s -w" -o "$out/bin/go-virtual-mapper.tmp" .
mv "$out/bin/go-virtual-mapper.tmp" "$out/bin/go-virtual-mapper"
echo "verge-testkit: go-virtual-mapper built in $out/bin in $SECONDS s" >&2
