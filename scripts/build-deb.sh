#!/usr/bin/env bash
# Builds the Debian package target/debian/tenure_<version>-1_<arch>.deb and prints its path.
#
#   scripts/build-deb.sh
#
# Needs cargo-deb (cargo install cargo-deb --locked --version 3.8.0) and dpkg. The release
# binary is built once; the man pages and shell completions are generated from it (tenure man
# --dir, tenure completions), so they say exactly what its --help says; then cargo-deb packs
# what [package.metadata.deb] in crates/tenure-cli/Cargo.toml lists, without building again.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo deb --version >/dev/null 2>&1 || {
  echo "build-deb: cargo-deb is missing: cargo install cargo-deb --locked --version 3.8.0" >&2
  exit 1
}

# TENURE_DEB_PROFILE=dev packs the debug build instead (CI: the same code and files, checked
# without a 7-minute release build); the package for a server is the release one.
profile="${TENURE_DEB_PROFILE:-release}"
case "$profile" in
  release) dir=release ;;
  dev) dir=debug ;;
  *) echo "build-deb: TENURE_DEB_PROFILE is release or dev, not $profile" >&2; exit 64 ;;
esac
cargo build --profile "$profile" --locked -p tenure-cli
# cargo-deb finds the binary the same way (CARGO_TARGET_DIR, else target/).
tenure="${CARGO_TARGET_DIR:-target}/$dir/tenure"

# Next to the binary, where [package.metadata.deb] lists them (cargo-deb reads its
# `target/release/` as the real target directory). Man pages compressed as Debian wants them,
# without a timestamp: the same binary makes the same package.
assets="$(dirname "$tenure")/deb-assets"
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
"$tenure" man --dir "$assets/man" >/dev/null
gzip -9n "$assets"/man/*.1
"$tenure" completions bash >"$assets/completions/tenure.bash"
"$tenure" completions zsh >"$assets/completions/_tenure"
"$tenure" completions fish >"$assets/completions/tenure.fish"

# The last line cargo-deb prints is the package's path.
cargo deb --no-build --profile "$profile" --locked -p tenure-cli "$@" | tail -n 1
