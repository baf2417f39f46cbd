#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl of one
# pinned Kubernetes release from the Go module proxy into "$1/bin".
# Usage: build.sh <cache-dir> <k8s-version, e.g. 1.37.2>
# Called by verge-testkit (crates/testkit/src/control_plane/build.rs); idempotent: the
# binaries are moved into place only once all of them built, and a "complete" stamp is written.
set -euo pipefail
dir=$1
ver=$2
minor=$(echo "$ver" | cut -d. -f2)
staging="0.${ver#*.}"
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir/src/cmd/etcd" "$dir/bin"
sed -e "s/@K8S@/$ver/" -e "s/@STAGING@/$staging/" "$here/go.mod.in" > "$dir/src/go.mod"
cp "$here/cmd/etcd/main.go" "$dir/src/cmd/etcd/main.go"
cd "$dir/src"
export GOFLAGS=-mod=mod CGO_ENABLED=0
pkg=k8s.io/component-base/version
cgo=k8s.io/client-go/pkg/version
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ld="-s -w"
for p in $pkg $cgo; do
  ld="$ld -X $p.gitVersion=v$ver -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=$date"
done

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
      echo "verge-testkit:   $label: $((SECONDS - started)) s (total $((SECONDS / 60)) min $((SECONDS % 60)) s of ~9 min)" >&2
    fi
  done
  wait "$pid"
}

targets=(./cmd/etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
         k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
echo "verge-testkit: [0/${#targets[@]}] downloading modules for Kubernetes v$ver" >&2
progress "go mod download" go mod download || true
tmp="$dir/bin.tmp"
rm -rf "$tmp"; mkdir -p "$tmp"
i=0
for target in "${targets[@]}"; do
  i=$((i + 1))
  echo "verge-testkit: [$i/${#targets[@]}] go build $target" >&2
  progress "go build ${target##*/}" go build -trimpath -ldflags "$ld" -o "$tmp/" "$target"
done
mv "$tmp"/* "$dir/bin/"
rmdir "$tmp"
echo "v$ver" > "$dir/complete"
echo "verge-testkit: control plane v$ver built in $dir/bin in $((SECONDS / 60)) min $((SECONDS % 60)) s" >&2
