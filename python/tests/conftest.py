"""Shared fixtures: a unique ring name per test, the spawn context."""

import multiprocessing as mp
import os
import uuid

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running (set SHMRING_SLOW=1 to run)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SHMRING_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set SHMRING_SLOW=1 to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def name():
    n = f"pytest-{os.getpid()}-{uuid.uuid4().hex[:10]}"
    yield n
    try:
        os.unlink(f"/dev/shm/shmring.{n}")
    except FileNotFoundError:
        pass


@pytest.fixture
def spawn():
    return mp.get_context("spawn")
