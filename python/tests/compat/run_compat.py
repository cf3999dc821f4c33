"""py-sharedmemory's own test suite and examples, run over ``shmring``.

Fetches py-sharedmemory's sdist from PyPI into a cache directory (``pip download
--no-binary :all: --no-deps``; nothing of it is kept in this repository), extracts its
``tests/`` and ``examples/`` into a scratch directory, and runs:

1. its test suite with ``shim/`` on ``PYTHONPATH`` (the shim maps its three public names onto
   ``shmring``), deselecting the tests listed in ``deselect.txt`` — those that read or patch
   py-sharedmemory's internals, and those that need work-sharing receivers; every other test
   must pass. One patch is applied to the extracted copy: the ``make_pair`` fixture's
   teardown asserts four private attributes of py-sharedmemory's sender (``_blocks``,
   ``_pool``, ``_mapped_in_flight``, ``_ack_thread``); those lines are replaced by a check of
   the public ``closed`` flags (``tests/test_queue_sizes.py`` checks that closing leaves no
   segment behind); and shmring's ``RuntimeWarning`` when ``Receiver.close()`` discards
   unread messages (py-sharedmemory has none) is ignored rather than an error;
2. each of its three examples with only its import line changed to import ``shmring``
   (``worker_pool.py`` too: receivers shared by worker processes are work-sharing, a group).

Usage: ``python run_compat.py [--version 4.3.1] [--cache DIR] [--groups] [pytest args...]``.
Exits non-zero if anything fails. Needs ``pytest``, ``pytest-timeout`` (py-sharedmemory's
pytest settings use it) and ``numpy``, and network access to PyPI (once: the sdist is cached).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
VERSION = "4.3.1"

# The make_pair teardown's private asserts, and what replaces them.
PRIVATE_TEARDOWN = (
    "        assert not sender._blocks\n"
    "        assert not sender._pool\n"
    "        assert sender._mapped_in_flight == 0\n"
    "        assert sender._ack_thread is None or not sender._ack_thread.is_alive()\n"
)
OUR_TEARDOWN = "        assert sender.closed and receiver.closed\n"

# Each example's import line and its shmring equivalent.
IMPORTS = {
    "from py_sharedmemory import SharedMemorySender, create_shared_memory_pair":
        "from shmring import Sender as SharedMemorySender, create_pair as create_shared_memory_pair",
    "from py_sharedmemory import SharedMemoryReceiver, create_shared_memory_pair":
        "from shmring import Receiver as SharedMemoryReceiver, "
        "create_pair as create_shared_memory_pair",
}


def fetch(version: str, cache: Path) -> Path:
    """The sdist of ``version`` in ``cache``, downloaded with pip when missing."""
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / f"py_sharedmemory-{version}.tar.gz"
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary",
                        ":all:", "--no-deps", f"py-sharedmemory=={version}", "-d", str(cache)],
                       check=True)
    return sdist


def extract(sdist: Path, into: Path) -> Path:
    """Extracts the sdist's ``tests/`` and ``examples/`` (not its package: the shim stands in
    for it) into a fresh ``into``; returns the extracted root."""
    import shutil

    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        # Its pytest settings (pyproject.toml), tests, examples and the benchmark scripts its
        # tests import; never the package itself.
        wanted = [m for m in tar.getmembers()
                  if m.name.split("/")[1:2] in (["tests"], ["examples"], ["benchmarks"],
                                                ["pyproject.toml"])]
        tar.extractall(into, members=wanted, filter="data")
    root = into / top
    conftest = root / "tests" / "conftest.py"
    text = conftest.read_text()
    if PRIVATE_TEARDOWN not in text:
        raise SystemExit("conftest.py changed upstream: review the teardown patch")
    conftest.write_text(text.replace(PRIVATE_TEARDOWN, OUR_TEARDOWN))
    return root


def deselected(groups: bool) -> list[tuple[str, str, str]]:
    """``(section, test id, reason)`` for every listed test; ``needs-groups`` ones are left
    out when ``groups`` (to see whether they pass)."""
    out, section = [], ""
    for line in (HERE / "deselect.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        test, _, reason = line.partition("  # ")
        if not reason:
            raise SystemExit(f"deselect.txt: {test} has no reason")
        if not (groups and section == "needs-groups"):
            out.append((section, test.strip(), reason.strip()))
    return out


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(HERE / "shim"), e.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    return e


def run_examples(root: Path) -> int:
    failed = 0
    for example in sorted((root / "examples").glob("*.py")):
        text = example.read_text()
        for theirs, ours in IMPORTS.items():
            text = text.replace(theirs, ours)
        if "py_sharedmemory" in text:
            raise SystemExit(f"{example.name}: an import line this runner does not know")
        mine = example.with_name(f"shmring_{example.name}")
        mine.write_text(text)
        r = subprocess.run([sys.executable, str(mine)], cwd=root, capture_output=True,
                           text=True, timeout=300, check=False)
        ok = r.returncode == 0
        print(f"example {example.name}: {'ok' if ok else 'FAILED'} {r.stdout.strip()}")
        if not ok:
            print(r.stderr)
            failed += 1
    return failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default=VERSION)
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("SHMRING_COMPAT_CACHE",
                                                REPO / "target" / "compat-cache")))
    ap.add_argument("--work", type=Path, default=REPO / "target" / "compat")
    ap.add_argument("--groups", action="store_true",
                    help="also run the tests and the example that need work-sharing receivers")
    ap.add_argument("--no-examples", action="store_true")
    args, rest = ap.parse_known_args()
    root = extract(fetch(args.version, args.cache), args.work)
    listed = deselected(args.groups)
    sections: dict[str, int] = {}
    for section, _, _ in listed:
        sections[section] = sections.get(section, 0) + 1
    print("deselected:", ", ".join(f"{n} {s}" for s, n in sorted(sections.items())) or "none")
    # shmring warns when Receiver.close() discards unread messages, py-sharedmemory never
    # does (its make_pair teardown closes receivers with messages unread, under
    # filterwarnings=error): that one warning is not an error here.
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-W",
           "ignore:shmring.Receiver.close() discarded:RuntimeWarning", "tests", *rest]
    for _, test, _ in listed:
        # A whole module (no "::") cannot even be collected without py-sharedmemory's internals.
        cmd += ["--deselect", test] if "::" in test else ["--ignore", test]
    code = subprocess.run(cmd, cwd=root, env=env(), check=False).returncode
    failed = 0 if args.no_examples else run_examples(root)
    return code or (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
