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
echo "verge-testkit: resolving modules for Kubernetes v$ver" >&2
go mod download >&2 || true
tmp="$dir/bin.tmp"
rm -rf "$tmp"; mkdir -p "$tmp"
for target in ./cmd/etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
              k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl; do
  echo "verge-testkit: go build $target" >&2
  go build -trimpath -ldflags "$ld" -o "$tmp/" "$target"
done
mv "$tmp"/* "$dir/bin/"
rmdir "$tmp"
echo "v$ver" > "$dir/complete"
echo "verge-testkit: control plane v$ver built in $dir/bin" >&2
