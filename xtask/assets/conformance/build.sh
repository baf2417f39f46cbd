#!/usr/bin/env bash
# Builds the pinned Kubernetes release's e2e test binary and agnhost into "$1/bin" from the Go
# module proxy, for `cargo xtask conformance` (xtask/src/conformance/build.rs).
# Usage: build.sh <cache-dir> <k8s-version, e.g. 1.37.1>
#   bin/e2e.test  go test -c ./suite: the spec packages test/e2e/{apps,auth,common,network,node,
#                 scheduling,storage} with the e2e framework (suite/suite_test.go)
#   bin/agnhost   go build k8s.io/kubernetes/test/images/agnhost (static, for the agnhost image)
# Idempotent: the binaries are moved into place only once both built, then the stamp "complete"
# (reading "v<version> <revision>", $3) is written.
set -euo pipefail
dir=$1
ver=$2
revision=$3
minor=$(echo "$ver" | cut -d. -f2)
staging="0.${ver#*.}"
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir/src" "$dir/bin"
sed -e "s/@K8S@/$ver/" -e "s/@STAGING@/$staging/" "$here/go.mod.in" > "$dir/src/go.mod"
# A package of the module's own that pins the spec packages (go mod tidy needs one).
printf 'package conformance\n\nimport (\n' > "$dir/src/deps.go"
for p in apps auth common network node scheduling storage; do
  printf '\t_ "k8s.io/kubernetes/test/e2e/%s"\n' "$p" >> "$dir/src/deps.go"
done
printf ')\n' >> "$dir/src/deps.go"
rm -rf "$dir/src/nodeconformance" "$dir/src/suite"
mkdir -p "$dir/src/suite"
cp "$here/suite/suite_test.go" "$dir/src/suite/"
cd "$dir/src"
ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $p.gitVersion=v$ver -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done

# shellcheck source=../../../crates/testkit/assets/go-build.sh
. "$here/../../../crates/testkit/assets/go-build.sh"
expected="10-30 min cold"
tmp="$dir/bin.tmp"
rm -rf "$tmp"; mkdir -p "$tmp"
echo "xtask: [0/2] downloading modules for Kubernetes v$ver e2e" >&2
progress "go mod tidy" go mod tidy
echo "xtask: [1/2] go test -c ./suite (test/e2e/{apps,auth,common,network,node,scheduling,storage})" >&2
progress "go test -c suite" go test -c -vet=off -trimpath -ldflags "$ld" -o "$tmp/e2e.test" ./suite
echo "xtask: [2/2] go build k8s.io/kubernetes/test/images/agnhost" >&2
progress "go build agnhost" go build -trimpath -ldflags "$ld" -o "$tmp/agnhost" k8s.io/kubernetes/test/images/agnhost
mv "$tmp"/* "$dir/bin/"
rmdir "$tmp"
echo "v$ver $revision" > "$dir/complete"
echo "xtask: e2e.test and agnhost v$ver built in $dir/bin in $((SECONDS / 60)) min $((SECONDS % 60)) s" >&2
