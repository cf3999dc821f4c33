"""py-sharedmemory's public names over ``shmring``: what a user switching packages changes.

Only for running py-sharedmemory's own test suite and examples over ``shmring``
(``python/tests/compat/run_compat.py``). The three public names map one to one; the default
capacity is py-sharedmemory's (0: unbounded). The submodules ``sender``, ``receiver``,
``convert``, ``factory`` exist only so that test modules importing them load: every name in
them raises ``NotImplementedError`` (the tests that use them are listed in
``deselect.txt``).
"""

from shmring import Receiver as SharedMemoryReceiver
from shmring import Sender as SharedMemorySender
from shmring import create_pair as _create_pair

__version__ = "4.3.1"
__all__ = ["SharedMemoryReceiver", "SharedMemorySender", "__version__", "create_shared_memory_pair"]


def create_shared_memory_pair(capacity=0, *, ctx=None):
    """``shmring.create_pair(capacity, ctx=ctx)``."""
    return _create_pair(capacity, ctx=ctx)
