#!/usr/bin/env bash
# py-sharedmemory's own test suite and examples over the shmring package (issue 29): its sdist
# is fetched from PyPI into target/compat-cache (once), its tests run through the name shim in
# python/tests/compat with the tests listed in python/tests/compat/deselect.txt deselected
# (py-sharedmemory internals; by-design differences), then its three examples with only the
# import line changed. Uses the virtualenv ci/python.sh made (target/pyvenv; builds one the
# same way when it is missing; SHMRING_VENV names another) plus pytest-timeout, which
# py-sharedmemory's pytest settings use.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SHMRING_VENV:-target/pyvenv}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import shmring" 2>/dev/null; then
    PY=${PYTHON:-python3}
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
    "$VENV/bin/pip" install --quiet ./python pytest numpy
fi
# pytest-timeout: its pytest settings use it; matplotlib: its benchmark-plot test.
"$VENV/bin/pip" install --quiet pytest-timeout matplotlib
"$VENV/bin/python" python/tests/compat/run_compat.py "$@"
