"""Which LevelDB binding a store opens through: the compiled extension's (the fast paths, see
:mod:`spark_statestore.native`) or plyvel (the reference path). Both have plyvel's
interface for what the store uses (``DB``, snapshots, iterators, ``WriteBatch``) and its
error classes (``Error``, ``CorruptionError``, ``IOError``), and both read and write the
same files. The extension adds what plyvel has no counterpart for: column reads and writes,
and point reads that decode the envelope (``get_value``/``get_record``, refusing a malformed
one with its ``EnvelopeError``; see :mod:`~spark_statestore.store.point`).
"""

from __future__ import annotations

import sys
from types import ModuleType

from spark_statestore import native

__all__ = ["ERROR_MODULES", "binding", "loaded_bindings", "refused_envelope"]

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


def refused_envelope(exc: BaseException) -> bytes | None:
    """The stored envelope a binding's point read refused to decode (the extension's
    ``EnvelopeError``, which hands it back for the store's decoder to name what is wrong),
    or None when ``exc`` is something else."""
    for module in loaded_bindings():
        refused = getattr(module, "EnvelopeError", None)
        if refused is not None and isinstance(exc, refused):
            envelope: bytes = exc.args[0]
            return envelope
    return None
