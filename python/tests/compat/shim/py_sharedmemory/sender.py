"""Stand-in for py_sharedmemory.sender (see _private)."""

from ._private import stub

__getattr__ = stub("sender")
