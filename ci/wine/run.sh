#!/usr/bin/env bash
# Cargo's runner for x86_64-pc-windows-gnu (see .cargo/config.toml): runs a Windows executable
# under Wine, headless, in a throw-away prefix of its own (made on first use). Wine 8 lacks
# bcryptprimitives.dll, which Rust's std imports; ci/wine/bcryptprimitives.c provides it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export WINEPREFIX="${WINEPREFIX:-${TMPDIR:-/tmp}/shmring-wine-$(id -u)}"
export WINEDEBUG="${WINEDEBUG:--all}"
# No display: keep Wine from looking for one.
unset DISPLAY WAYLAND_DISPLAY
wine="$(command -v wine64 || command -v wine || echo /usr/lib/wine/wine64)"
dll="$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"
if [ ! -f "$dll" ]; then
    mkdir -p "$WINEPREFIX"
    "$wine" wineboot --init >/dev/null 2>&1 || true
    x86_64-w64-mingw32-gcc -O2 -shared -o "$dll.tmp" "$here/bcryptprimitives.c" -lbcrypt
    mv "$dll.tmp" "$dll"
fi
exec "$wine" "$@"
