#!/usr/bin/env bash
# Builds the Python example controller into <out-dir>:
#   <out-dir>/venv/           a virtual environment with requirements.txt installed
#   <out-dir>/gen/            Python code generated from the repository's .proto files
#   <out-dir>/controller.py   the program (run it with <out-dir>/venv/bin/python)
#   <out-dir>/bench.py        its bench mode (cargo xtask bench apps)
# The venv is reused while requirements.txt is unchanged; the code is generated every run.
# Usage: build.sh <out-dir>
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 <out-dir>" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
proto="$here/../../proto"
mkdir -p "$1"
out="$(cd "$1" && pwd)"
venv="$out/venv"
stamp="$venv/requirements.txt"

step() { echo "python-controller: $*"; }

if [[ -x "$venv/bin/python" ]] && cmp -s "$here/requirements.txt" "$stamp"; then
  step "reusing the venv in $venv"
else
  step "creating a venv in $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  step "installing requirements.txt (grpcio, grpcio-tools, protobuf) from PyPI"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    -r "$here/requirements.txt"
  cp "$here/requirements.txt" "$stamp"
fi

step "generating Python code from $(cd "$proto" && pwd)"
rm -rf "$out/gen"
mkdir -p "$out/gen"
"$venv/bin/python" -m grpc_tools.protoc -I "$proto" \
  --python_out="$out/gen" --grpc_python_out="$out/gen" \
  verge/message/v1/message.proto verge/hub/v1/join.proto verge/hub/v1/hub.proto

step "copying controller.py and bench.py to $out"
cp "$here/controller.py" "$here/bench.py" "$out/"
step "done: run $venv/bin/python $out/controller.py --help"
