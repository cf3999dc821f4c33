#!/usr/bin/env bash
# The frame server and its C client on Windows: both cross-compiled with mingw-w64 against
# libshmring.a (x86_64-pc-windows-gnu) and run under Wine. TCP on loopback (UnrealCV's
# protocol), the ring through a named section: ucv-client checks a shared frame against the
# server's checksum and the pattern, and a BMP received over TCP against the frame in the ring,
# byte for byte; render-check holds the renderer (its SSE2 stores) to its definition.
#   bash examples/frame-server/wine.sh            (the toolchain: as ci/windows.sh installs it)
set -euo pipefail
cd "$(dirname "$0")/../.."
for tool in x86_64-w64-mingw32-gcc x86_64-w64-mingw32-g++; do
  command -v "$tool" >/dev/null || { echo "wine.sh: $tool is missing (apt-get install \
gcc-mingw-w64-x86-64 g++-mingw-w64-x86-64 wine64; ci/windows.sh does)" >&2; exit 2; }
done
target=x86_64-pc-windows-gnu
rustup target add "$target" >/dev/null 2>&1 || true
cargo build --quiet --target "$target" -p ring-ffi
lib="${CARGO_TARGET_DIR:-target}/$target/debug/libshmring.a"
# The system libraries Rust's std and windows-sys need in a static link (as ci/windows.sh).
syslibs=(-lws2_32 -luserenv -lntdll -lbcrypt -ladvapi32 -lkernel32 -lsynchronization)
WINEPREFIX="$(mktemp -d "${TMPDIR:-/tmp}/shmring-wine-fs.XXXXXX")"
export WINEPREFIX
work="$(mktemp -d "${TMPDIR:-/tmp}/shmring-win-fs.XXXXXX")"
wine="$(command -v wine64 || echo /usr/lib/wine/wine64)"
cleanup() {
  "$(dirname "$wine")/wineserver" -k 2>/dev/null || true
  rm -rf "$WINEPREFIX" "$work"
}
trap cleanup EXIT
x86_64-w64-mingw32-g++ -std=c++17 -O2 -Wall -Wextra -Werror -static -Iinclude \
  examples/frame-server/frame_server.cpp "$lib" "${syslibs[@]}" -o "$work/frame-server.exe"
x86_64-w64-mingw32-gcc -std=c11 -O2 -Wall -Wextra -Werror -static -Iinclude \
  examples/frame-server/ucv_client.c "$lib" "${syslibs[@]}" -o "$work/ucv-client.exe"
x86_64-w64-mingw32-g++ -std=c++17 -O2 -Wall -Wextra -Werror -static \
  examples/frame-server/render_check.cpp -o "$work/render-check.exe"
ci/wine/run.sh "$work/render-check.exe" | tr -d '\r'

w=320 h=240
ring="fs-wine-$$"
ci/wine/run.sh "$work/frame-server.exe" "$ring" - "$w" "$h" --tcp 0 >"$work/server.out" 2>&1 &
server=$!
port=
for _ in $(seq 600); do # 60 s at most: Wine starts slowly on a loaded machine
  port="$(tr -d '\r' <"$work/server.out" | sed -n 's/^serving .* tcp 127\.0\.0\.1:\([0-9]*\)$/\1/p')"
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ]; then
  cat "$work/server.out" >&2
  echo "wine.sh: the frame server did not start under Wine" >&2
  exit 1
fi
tr -d '\r' <"$work/server.out"
rc=0
timeout 120 ci/wine/run.sh "$work/ucv-client.exe" "$port" "$w" "$h" | tr -d '\r' || rc=$?
kill "$server" 2>/dev/null || true
[ "$rc" -eq 0 ] && echo "frame server under Wine: ok"
exit "$rc"
