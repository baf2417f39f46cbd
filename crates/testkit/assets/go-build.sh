# Shared by the test kit's Go builds (control-plane/build.sh, containerd/build.sh; jaeger/build.sh
# uses progress only): sourced, not run. Both build static binaries from the Go module proxy in "$dir/src" and move them into
# "$dir/bin" only once all of them built, then write a stamp file.
#
# The sourcing script sets, before calling go_build_all:
#   dir       the cache directory (its src/ holds the go.mod)
#   ver       the version being built (written into the stamp)
#   what      what it builds, for the messages (e.g. "containerd")
#   targets   array of Go packages to build
#   stamp     the stamp file name in "$dir"
#   tmp       a staging directory for the binaries
#   expected  the expected total time, for the progress lines (e.g. "~4 min")
#   ld        -ldflags;  tags (optional): -tags

export GOFLAGS=-mod=mod CGO_ENABLED=0

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
      echo "verge-testkit:   $label: $((SECONDS - started)) s (total $((SECONDS / 60)) min $((SECONDS % 60)) s of $expected)" >&2
    fi
  done
  wait "$pid"
}

# Downloads the modules (go mod download "$@"), builds every target into "$tmp", moves the
# binaries into "$dir/bin" and writes "$dir/$stamp".
go_build_all() {
  echo "verge-testkit: [0/${#targets[@]}] downloading modules for $what v$ver" >&2
  progress "go mod download" go mod download "$@" || true
  rm -rf "$tmp"; mkdir -p "$tmp"
  local i=0 target
  for target in "${targets[@]}"; do
    i=$((i + 1))
    echo "verge-testkit: [$i/${#targets[@]}] go build $target" >&2
    progress "go build ${target##*/}" go build -trimpath -tags "${tags:-}" -ldflags "$ld" -o "$tmp/" "$target"
  done
  mv "$tmp"/* "$dir/bin/"
  rmdir "$tmp"
  echo "v$ver" > "$dir/$stamp"
  echo "verge-testkit: $what v$ver built in $dir/bin in $((SECONDS / 60)) min $((SECONDS % 60)) s" >&2
}
