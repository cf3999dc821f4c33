"""Stand-in for py_sharedmemory.convert (see _private)."""

from ._private import stub

__getattr__ = stub("convert")
