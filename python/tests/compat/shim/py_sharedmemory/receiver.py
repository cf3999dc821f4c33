"""Stand-in for py_sharedmemory.receiver (see _private)."""

from ._private import stub

__getattr__ = stub("receiver")
