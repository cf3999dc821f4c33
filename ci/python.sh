#!/usr/bin/env bash
# The Python package the way a user installs it: a fresh virtualenv under target/pyvenv,
# `pip install ./python pytest numpy pyarrow`, then pytest on python/tests. Needs Python >= 3.11
# and network access to PyPI (maturin is the build backend). pytest's exit code 5 (no tests
# collected) fails this script like any other non-zero code.
set -euo pipefail
cd "$(dirname "$0")/.."
# The crate is outside the workspace (see python/Cargo.toml): format and lint it here.
cargo fmt --manifest-path python/Cargo.toml -- --check
cargo clippy --manifest-path python/Cargo.toml --all-targets -- -D warnings
PY=${PYTHON:-python3}
VENV=target/pyvenv
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet ./python pytest numpy pyarrow
# pytest-timeout: a test that hangs fails after 10 minutes with every thread's stack, naming
# itself, instead of holding CI until its overall limit.
"$VENV/bin/pip" install --quiet pytest-timeout==2.4.0
# uvloop: test_asyncio.py runs the awaitables on its event loop too (pinned, as the tools above).
"$VENV/bin/pip" install --quiet uvloop==0.23.0
# The real UnrealCV client, for test_unrealcv.py (which builds examples/frame-server itself).
"$VENV/bin/pip" install --quiet unrealcv==1.3.2
# The hand-written stubs (python/pysrc/shmring/_shmring.pyi) against the built extension:
# every name, class and signature must match what the module really has (mypy's stubtest,
# pinned so a new release's checks cannot fail an unchanged tree).
"$VENV/bin/pip" install --quiet mypy==2.4.1
# Run from outside the source tree so the installed package (not python/pysrc) is imported.
cd python/tests
../../"$VENV"/bin/python -m mypy.stubtest shmring._shmring
../../"$VENV"/bin/python -m pytest -q -p no:cacheprovider --timeout 600 .
# The asyncio waits without the loops' io_uring driver (which the run above uses where the
# kernel offers io_uring's futex wait): woken through ring-os's reactor thread.
SHMRING_ASYNC_DRIVER=0 ../../"$VENV"/bin/python -m pytest -q -p no:cacheprovider --timeout 600 test_asyncio.py
# The asyncio client example checks its own result (frames in order, checksums, the other task
# kept running) and exits non-zero otherwise.
../../"$VENV"/bin/python ../examples/asyncio_frames.py
