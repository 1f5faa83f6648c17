#!/usr/bin/env bash
# Clippy over the feature sets users build, beside CI's `cargo clippy --workspace
# --all-targets --all-features`: the library with its default features and with each backend
# alone, and a slim `tenure` with each of serve's rooms alone and with none. Each set builds
# the library again with its own features; .ci/run runs this niced beside the fault suite,
# whose scenarios mostly wait. Usage: scripts/clippy-matrix.sh
set -euo pipefail
cd "$(dirname "$0")/.."

lint() {
  echo "==> cargo clippy $*"
  cargo clippy -q "$@" -- -D warnings
}

# What a user of the library builds: its default features, and each backend alone.
lint -p tenure --lib
for backend in sqlite postgres mysql; do
  lint -p tenure --lib --no-default-features --features "$backend"
done
# A slim `tenure`: serve's rooms are features (default: all); each alone, and none.
for rooms in "" http-api consul etcd; do
  lint -p tenure-cli --no-default-features --features "$rooms"
done
echo "clippy's feature matrix: clean"
