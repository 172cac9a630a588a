"""Which LevelDB binding a store opens through: the compiled extension's (the fast paths, see
:mod:`spark_statestore.native`) or plyvel (the reference path). Both have plyvel's
interface for what the store uses (``DB``, snapshots, iterators, ``WriteBatch``) and its
error classes (``Error``, ``CorruptionError``, ``IOError``), and both read and write the
same files.
"""

from __future__ import annotations

import sys
from types import ModuleType

from spark_statestore import native

__all__ = ["ERROR_MODULES", "binding", "loaded_bindings"]

ERROR_MODULES = ("plyvel", "spark_statestore_native")
"""The modules whose ``Error``/``CorruptionError`` classes the store translates."""


def binding() -> ModuleType:
    """The module to open LevelDB databases with now (imported on the first call)."""
    extension = native.module()
    if extension is not None:
        return extension
    import plyvel

    loaded: ModuleType = plyvel
    return loaded


def loaded_bindings() -> list[ModuleType]:
    """The bindings this process has imported (their errors may reach the store)."""
    return [m for name in ERROR_MODULES if (m := sys.modules.get(name)) is not None]
