#!/usr/bin/env bash
# Installs libshmring (.so and .a), include/shmring.h, include/shmring.hpp and shmring.pc
# under PREFIX: `bash ring-ffi/install.sh /usr/local` (PROFILE=debug for a debug build).
# Then: `PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs shmring`.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:?usage: install.sh PREFIX}
profile=${PROFILE:-release}
if [ "$profile" = debug ]; then
  cargo build -p ring-ffi
else
  cargo build -p ring-ffi --profile "$profile"
fi
dir=${CARGO_TARGET_DIR:-target}/$profile
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0644 "$dir/libshmring.a" "$prefix/lib/"
install -m 0755 "$dir/libshmring.so" "$prefix/lib/"
install -m 0644 include/shmring.h include/shmring.hpp "$prefix/include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" ring-ffi/shmring.pc.in \
  >"$prefix/lib/pkgconfig/shmring.pc"
echo "installed shmring $version under $prefix"
