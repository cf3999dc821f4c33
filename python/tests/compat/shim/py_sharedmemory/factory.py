"""Stand-in for py_sharedmemory.factory (see _private)."""

from ._private import stub

__getattr__ = stub("factory")
