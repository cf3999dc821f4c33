#!/usr/bin/env bash
# vgi-rpc's own RPC tests with its shared-memory side channel switched to shmring.vgi (every
# batch through the ring's allocator: vgi's size threshold at 0). Needs Python 3.13 (vgi-rpc
# >= 0.52 requires it): `python3.13` on PATH, else pyenv's newest 3.13; without one it says so
# and exits 0. Needs network access to PyPI (vgi-rpc, its test dependencies, and its sdist,
# whose tests/ are unpacked under target/vgi; nothing of vgi's is committed here).
set -euo pipefail
cd "$(dirname "$0")/.."
VGI_VERSION=0.52.0
PY=""
if command -v python3.13 >/dev/null 2>&1 && python3.13 -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null; then
    PY=$(command -v python3.13)
else
    for d in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*; do
        [ -x "$d/bin/python3" ] && PY="$d/bin/python3"
    done
fi
if [ -z "$PY" ]; then
    echo "ci/vgi.sh: SKIPPED: no Python 3.13 (neither python3.13 on PATH nor a pyenv 3.13); vgi-rpc $VGI_VERSION needs it"
    exit 0
fi
echo "ci/vgi.sh: using $PY ($("$PY" -V))"
WORK=target/vgi
VENV=$WORK/venv
rm -rf "$WORK"
mkdir -p "$WORK"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
# What vgi's test_rpc, test_rpc_bidi and test_stream_cancel import (its conftest starts HTTP
# and Unix-socket workers too), pytest's plugins its conftest hooks into, and this package.
"$VENV/bin/pip" install --quiet ./python "vgi-rpc[http,cli]==$VGI_VERSION" pytest pytest-timeout \
    pytest-xdist psutil hypothesis
"$VENV/bin/pip" download --quiet --no-binary :all: --no-deps "vgi-rpc==$VGI_VERSION" -d "$WORK/sdist"
tar xzf "$WORK/sdist/vgi_rpc-$VGI_VERSION.tar.gz" -C "$WORK"
SRC=$(pwd)/$WORK/vgi_rpc-$VGI_VERSION
PLUGIN=$(pwd)/python/tests/compat_vgi
# Our own checks of the side channel first (bounded writes, done notices, fallbacks).
(cd "$PLUGIN" && ../../../"$VENV"/bin/python -m pytest -q -p no:cacheprovider test_ring_segment.py)
# vgi's suite from its sdist, run the way its pyproject runs it (addopts cleared: no mypy/ruff
# plugins), with the plugin that switches the shm_pipe transport to the ring. The plugin fails
# the run if any batch fell back to the pipe or none went through the ring.
cd "$SRC"
PYTHONPATH="$SRC:$PLUGIN" VGI_RPC_SHM_MIN_BATCH_BYTES=0 "../venv/bin/python" -m pytest \
    -p shmring_vgi_plugin -p no:cacheprovider -o addopts= -o pythonpath=. --timeout=50 -q \
    tests/test_rpc.py tests/test_rpc_bidi.py tests/test_stream_cancel.py
