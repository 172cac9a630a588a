"""The compiled extension (``native/``, the ``spark_statestore_native`` module): the hot loops
in Rust, and the switch between them and the pure-Python reference paths.

With the extension installed (the README's setup builds it) the fast paths are on: stores
open through its LevelDB binding, followers read Kafka into Arrow columns and write them in
one call per chunk, scans and multi-gets decode in it. ``SPARK_STATESTORE_NATIVE`` decides:

- unset or ``auto``: the fast paths when the extension imports, else the reference paths;
- ``0`` / ``off``: the pure-Python reference paths (plyvel, confluent-kafka per record);
- ``1`` / ``on``: the fast paths, failing with :class:`~spark_statestore.errors.OptionError`
  when the extension is missing.

Both paths write the same bytes to the same LevelDB format: a store written by one opens
and reads the same through the other (tests hold them equal). The choice is read when a
store or a reader is opened, so a test may switch it between stores; one store must not be
open through both at once in one process (its owner lock already forbids that).

Nothing here imports the extension at module level.
"""

from __future__ import annotations

import os
from types import ModuleType

from spark_statestore.errors import OptionError

__all__ = ["ENV", "enabled", "module"]

ENV = "SPARK_STATESTORE_NATIVE"
_OFF = frozenset({"0", "off", "false", "no"})
_ON = frozenset({"1", "on", "true", "yes"})
_AUTO = frozenset({"", "auto"})
_missing: list[ImportError] = []  # the extension's import failure, once seen


def module() -> ModuleType | None:
    """The extension module when the fast paths are on, else None.

    Raises
    ------
    OptionError
        ``SPARK_STATESTORE_NATIVE`` is not one of its values, or requires the extension and
        it does not import.
    """
    setting = os.environ.get(ENV, "auto").strip().lower()
    if setting in _OFF:
        return None
    if setting not in _ON and setting not in _AUTO:
        raise OptionError(
            f"environment variable {ENV}={os.environ.get(ENV)!r} is not one of auto, 0/off, "
            "1/on; unset it to use the compiled extension when it is installed"
        )
    try:
        if _missing:
            raise _missing[0]
        import spark_statestore_native as extension
    except ImportError as exc:
        if not _missing:
            _missing.append(exc)
        if setting in _ON:
            raise OptionError(
                f"{ENV}={os.environ.get(ENV)!r} requires the compiled extension, which does "
                f"not import ({exc}); build it with `make setup` (it needs Rust and "
                "libleveldb-dev), or unset the variable"
            ) from exc
        return None
    loaded: ModuleType = extension
    return loaded


def enabled() -> bool:
    """True when the fast paths are on (see :func:`module`)."""
    return module() is not None
