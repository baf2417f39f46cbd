#!/usr/bin/env bash
# Builds the Go example controller into "$1/bin/go-controller": copies the Go sources into
# "$1/src", generates the Go code of Verge's proto/verge/hub/v1/{hub,join}.proto and
# proto/verge/message/v1/message.proto there with protoc-gen-go and protoc-gen-go-grpc
# (pinned below, installed with `go install` into "$GO_CONTROLLER_TOOLS" or "$1/tools"), and
# runs `go build`. The generated code is never written into the repository.
# Usage: PROTOC=<protoc> [PROTOC_INCLUDE=<protoc's include dir>] build.sh <out-dir>
set -euo pipefail
out=${1:?usage: PROTOC=<protoc> [PROTOC_INCLUDE=<dir>] build.sh <out-dir>}
: "${PROTOC:?PROTOC must name a protoc binary}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
protos=$(cd "$here/../../proto" && pwd)
tools=${GO_CONTROLLER_TOOLS:-$out/tools}
module=verge.invalid/examples/go-controller
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
      echo "go-controller:   $label: $((SECONDS - started)) s (total $SECONDS s)" >&2
    fi
  done
  wait "$pid"
}

mkdir -p "$tools"
stamp="$tools/versions"
if [ "$(cat "$stamp" 2>/dev/null)" != "$PROTOC_GEN_GO $PROTOC_GEN_GO_GRPC" ] \
  || [ ! -x "$tools/protoc-gen-go" ] || [ ! -x "$tools/protoc-gen-go-grpc" ]; then
  echo "go-controller: [1/3] go install $PROTOC_GEN_GO $PROTOC_GEN_GO_GRPC" >&2
  GOBIN=$tools progress "go install protoc-gen-go" go install "$PROTOC_GEN_GO"
  GOBIN=$tools progress "go install protoc-gen-go-grpc" go install "$PROTOC_GEN_GO_GRPC"
  echo "$PROTOC_GEN_GO $PROTOC_GEN_GO_GRPC" > "$stamp"
fi

echo "go-controller: [2/3] protoc verge/hub/v1, verge/message/v1 -> Go" >&2
rm -rf "$out/src"
mkdir -p "$out/src" "$out/bin"
cp "$here"/go.mod "$here"/go.sum "$here"/*.go "$out/src/"
includes=(-I "$protos")
if [ -n "${PROTOC_INCLUDE:-}" ]; then includes+=(-I "$PROTOC_INCLUDE"); fi
# The .proto files have no go_package option: M maps each file to its Go package
# (hub.proto and join.proto are both package verge.hub.v1).
hub="$module/gen/verge/hub/v1;hubv1"
message="$module/gen/verge/message/v1;messagev1"
mappings=()
for opt in go_opt go-grpc_opt; do
  mappings+=("--$opt=module=$module"
    "--$opt=Mverge/hub/v1/hub.proto=$hub"
    "--$opt=Mverge/hub/v1/join.proto=$hub"
    "--$opt=Mverge/message/v1/message.proto=$message")
done
"$PROTOC" "${includes[@]}" \
  --plugin=protoc-gen-go="$tools/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$tools/protoc-gen-go-grpc" \
  --go_out="$out/src" --go-grpc_out="$out/src" "${mappings[@]}" \
  verge/hub/v1/hub.proto verge/hub/v1/join.proto verge/message/v1/message.proto

echo "go-controller: [3/3] go build go-controller" >&2
cd "$out/src"
progress "go build" go build -trimpath -ldflags "-s -w" -o "$out/bin/go-controller.tmp" .
mv "$out/bin/go-controller.tmp" "$out/bin/go-controller"
echo "go-controller: built $out/bin/go-controller in $SECONDS s" >&2
