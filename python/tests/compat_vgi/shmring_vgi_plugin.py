"""A pytest plugin that runs vgi-rpc's own test suite with its shared-memory side channel
switched to ``shmring.vgi`` (load it with ``-p shmring_vgi_plugin``; ``ci/vgi.sh`` does).

vgi's ``make_conn`` fixture builds its ``shm_pipe`` transport as
``ShmPipeTransport(pipe, ShmSegment.create(size))`` for each side; this plugin makes
``vgi_rpc.shm.ShmSegment.create`` return a :class:`shmring.vgi.SegmentPair` and
``vgi_rpc.rpc.ShmPipeTransport`` hand one side of it to each transport. vgi's size threshold is
set to 0, so every non-empty batch goes through the ring's allocator. At the end the plugin
prints how many batches were routed and fails the run if any fell back to the pipe or none
was routed at all.
"""

import os

os.environ["VGI_RPC_SHM_MIN_BATCH_BYTES"] = "0"

import pytest  # noqa: E402

import vgi_rpc.rpc  # noqa: E402
import vgi_rpc.shm  # noqa: E402

from shmring import vgi as ring_vgi  # noqa: E402

vgi_rpc.shm.SHM_MIN_BATCH_BYTES = 0

_pairs: list = []


class _RingShmSegment(vgi_rpc.shm.ShmSegment):
    """``ShmSegment`` whose ``create`` makes a ring side channel instead."""

    __slots__ = ()

    @classmethod
    def create(cls, size):  # type: ignore[override]
        pair = ring_vgi.SegmentPair(max(size, 64 << 20))
        _pairs.append(pair)
        return pair


vgi_rpc.shm.ShmSegment = _RingShmSegment
vgi_rpc.rpc.ShmPipeTransport = ring_vgi.ShmPipeTransport


def _totals():
    keys = ("routed", "reflected", "fallbacks", "viewed", "done_sent", "freed", "bad_notices")
    return {k: sum(p.stats[k] for p in _pairs) for k in keys}


def pytest_terminal_summary(terminalreporter):
    t = _totals()
    terminalreporter.write_line(
        f"shmring.vgi: {len(_pairs)} channels, {t['routed']} batches routed through the ring "
        f"allocator, {t['reflected']} sent back unchanged without a copy, {t['viewed']} "
        f"viewed zero-copy, {t['done_sent']} done notices, "
        f"{t['freed']} freed by their owner, {t['fallbacks']} fell back to the pipe, "
        f"{t['bad_notices']} bad notices"
    )


def pytest_sessionfinish(session, exitstatus):
    t = _totals()
    if _pairs and (t["fallbacks"] or t["bad_notices"] or not t["routed"]):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
