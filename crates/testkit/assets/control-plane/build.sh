#!/usr/bin/env bash
# Builds binaries of one pinned Kubernetes release from the Go module proxy into "$1/bin".
# Usage: build.sh <cache-dir> <k8s-version, e.g. 1.37.2> [control-plane|node]
#   control-plane (default): etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl;
#                            stamp "complete"
#   node:                    kubelet, kube-proxy; stamp "complete-node" (shares the module and
#                            the Go build cache with the control plane, so it is incremental)
# Called by verge-testkit (crates/testkit/src/control_plane/build.rs and kubelet_node/build.rs);
# idempotent: the binaries are moved into place only once all of them built, then the stamp is
# written.
set -euo pipefail
dir=$1
ver=$2
set_name=${3:-control-plane}
minor=$(echo "$ver" | cut -d. -f2)
staging="0.${ver#*.}"
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir/src/cmd/etcd" "$dir/bin"
sed -e "s/@K8S@/$ver/" -e "s/@STAGING@/$staging/" "$here/go.mod.in" > "$dir/src/go.mod"
cp "$here/cmd/etcd/main.go" "$dir/src/cmd/etcd/main.go"
cd "$dir/src"
pkg=k8s.io/component-base/version
cgo=k8s.io/client-go/pkg/version
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ld="-s -w"
for p in $pkg $cgo; do
  ld="$ld -X $p.gitVersion=v$ver -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=$date"
done

# shellcheck source=../go-build.sh
. "$here/../go-build.sh"

case $set_name in
  control-plane)
    targets=(./cmd/etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
             k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
    stamp=complete tmp="$dir/bin.tmp" expected="~9 min" ;;
  node)
    targets=(k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
    stamp=complete-node tmp="$dir/bin-node.tmp" expected="~4 min" ;;
  *) echo "build.sh: unknown set $set_name (control-plane|node)" >&2; exit 2 ;;
esac
what="Kubernetes $set_name"
go_build_all
