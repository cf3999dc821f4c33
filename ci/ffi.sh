#!/usr/bin/env bash
# The C ABI: the committed include/shmring.h is what cbindgen generates now; the C and C++
# peers (plain and ASan+UBSan) pass against Rust (cargo test -p ring-ffi); a static link works;
# the pkg-config file and the CMake examples build against an installed copy; `ringctl grab`
# and ucv-client (C, UnrealCV's protocol) read frames from the frame server; the frame-grabber
# benchmark (the real unrealcv client) runs once, --quick (one size, a few captures per path).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cbindgen >/dev/null; then
  cargo install cbindgen --locked
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "--- header is up to date"
cbindgen --quiet --config ring-ffi/cbindgen.toml --crate ring-ffi --output "$tmp/shmring.h"
if ! diff -u include/shmring.h "$tmp/shmring.h"; then
  echo "include/shmring.h is out of date: run" >&2
  echo "  cbindgen --config ring-ffi/cbindgen.toml --crate ring-ffi --output include/shmring.h" >&2
  exit 1
fi

echo "--- C and C++ tests against Rust peers (cargo test -p ring-ffi)"
cargo test -p ring-ffi

echo "--- static link"
cargo build -p ring-ffi
cc -std=c11 -D_DEFAULT_SOURCE -Wall -Wextra -Werror -Iinclude ring-ffi/tests/c/peer.c \
  "${CARGO_TARGET_DIR:-target}/debug/libshmring.a" -lpthread -ldl -lm -o "$tmp/peer-static"
"$tmp/peer-static" errors "ffi-static-$$"

echo "--- install, pkg-config, CMake example"
PROFILE=debug bash ring-ffi/install.sh "$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
pkg-config --cflags --libs shmring
cc -std=c11 examples/c-cmake/hello.c $(pkg-config --cflags --libs shmring) \
  -Wl,-rpath,"$tmp/prefix/lib" -o "$tmp/hello-pc"
"$tmp/hello-pc"
if ! command -v cmake >/dev/null; then
  echo "ffi: cmake is missing (ci/setup.sh installs it: apt-get install cmake)" >&2
  exit 1
fi
cmake -S examples/c-cmake -B "$tmp/build" >/dev/null
cmake --build "$tmp/build" >/dev/null
"$tmp/build/hello-c"
"$tmp/build/hello-cpp"
cmake -S examples/frame-server -B "$tmp/build-fs" >/dev/null
cmake --build "$tmp/build-fs" >/dev/null
"$tmp/build-fs/render-check"
# The same without SSE2 (the rows non-x86 hosts build), under ASan and UBSan.
c++ -std=c++17 -O1 -U__SSE2__ -fsanitize=address,undefined -Wall -Wextra -Werror \
  examples/frame-server/render_check.cpp -o "$tmp/render-check-portable"
"$tmp/render-check-portable"

echo "--- frame server: ringctl grab on its line protocol, ucv-client (C) on its UnrealCV port"
cargo build --quiet -p ringctl
cc -std=c11 -D_DEFAULT_SOURCE -Wall -Wextra -Werror examples/frame-server/ucv_client.c \
  $(pkg-config --cflags --libs shmring) -Wl,-rpath,"$tmp/prefix/lib" -o "$tmp/ucv-client"
"$tmp/build-fs/frame-server" "ffi-fs-$$" "$tmp/fs.sock" 320 240 --tcp 0 >"$tmp/fs.out" &
fs_pid=$!
for _ in $(seq 100); do grep -q '^serving' "$tmp/fs.out" && break; sleep 0.1; done
timeout 60 "${CARGO_TARGET_DIR:-target}/debug/ringctl" grab "ffi-fs-$$" --socket "$tmp/fs.sock" \
  --request frame --count 3
timeout 60 "$tmp/ucv-client" "$(sed -n 's/.*tcp 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/fs.out")" 320 240
kill "$fs_pid" && wait "$fs_pid"

echo "--- frame-grabber benchmark, --quick: the real unrealcv client, TCP against shared memory"
# The Python clients need shmring and unrealcv: the virtualenv ci/python.sh made, else a new one.
venv=target/pyvenv
if ! "$venv/bin/python" -c "import shmring, numpy, unrealcv" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet ./python numpy unrealcv==1.3.2
fi
timeout 300 "$venv/bin/python" examples/frame-server/bench.py --quick --server "$tmp/build-fs/frame-server"
echo "ffi: ok"
