"""Stand-ins for py-sharedmemory's private modules: importable, every name unusable."""


def stub(module: str):
    """A module ``__getattr__`` whose names raise ``NotImplementedError`` when used."""

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def internal(*args, **kwargs):
            raise NotImplementedError(f"py_sharedmemory.{module}.{name} is a py-sharedmemory "
                                      "internal; shmring has no equivalent")

        return internal

    return __getattr__
