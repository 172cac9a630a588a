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

Which paths run, and why, is logged once per process when a store or reader first asks
(INFO for the fast paths, with the extension's version and file; WARNING when ``auto`` falls
back because the extension does not import or is of another version than the package: the
two are released together, and a mismatched extension is never used).

Nothing here imports the extension at module level.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

from spark_statestore.errors import OptionError
from spark_statestore.version import __version__

__all__ = ["ENV", "enabled", "module", "status"]

log = logging.getLogger(__name__)

ENV = "SPARK_STATESTORE_NATIVE"
_OFF = frozenset({"0", "off", "false", "no"})
_ON = frozenset({"1", "on", "true", "yes"})
_AUTO = frozenset({"", "auto"})
_loaded: list[tuple[ModuleType | None, str]] = []  # the import's outcome, once seen
_announced: set[tuple[str, bool]] = set()  # (setting, fast) already logged


def _load() -> tuple[ModuleType | None, str]:
    """The extension and where it is from, or None and why it cannot be used (cached)."""
    if not _loaded:
        try:
            import spark_statestore_native as extension
        except ImportError as exc:
            _loaded.append((None, f"it does not import ({exc})"))
        else:
            version = getattr(extension, "__version__", None)
            # The wheel's package re-exports its compiled module: name the library itself.
            compiled = getattr(extension, "spark_statestore_native", extension)
            where = getattr(compiled, "__file__", None) or getattr(extension, "__file__", "?")
            if version != __version__:
                _loaded.append(
                    (
                        None,
                        f"the installed spark_statestore_native is version {version or 'unknown'} "
                        f"({where}), not this package's {__version__}; install the extension of "
                        "the same version (its wheel, or `make setup` in a checkout)",
                    )
                )
            else:
                _loaded.append((extension, f"spark_statestore_native {version} ({where})"))
    return _loaded[0]


def _announce(setting: str, fast: bool, reason: str) -> None:
    """Log once per process (and per setting) which paths run and why."""
    if (setting, fast) in _announced:
        return
    _announced.add((setting, fast))
    if fast:
        log.info("the compiled fast paths run: %s", reason)
    elif setting in _OFF:
        log.info("the pure-Python reference paths run: %s=%s", ENV, os.environ.get(ENV))
    else:
        log.warning(
            "the pure-Python reference paths run (slower), not the compiled extension: %s",
            reason,
        )


def module() -> ModuleType | None:
    """The extension module when the fast paths are on, else None.

    Raises
    ------
    OptionError
        ``SPARK_STATESTORE_NATIVE`` is not one of its values, or requires the extension and
        it does not import or is of another version than the package.
    """
    setting = os.environ.get(ENV, "auto").strip().lower()
    if setting in _OFF:
        _announce(setting, False, "")
        return None
    if setting not in _ON and setting not in _AUTO:
        raise OptionError(
            f"environment variable {ENV}={os.environ.get(ENV)!r} is not one of auto, 0/off, "
            "1/on; unset it to use the compiled extension when it is installed"
        )
    extension, reason = _load()
    if extension is None:
        if setting in _ON:
            raise OptionError(
                f"{ENV}={os.environ.get(ENV)!r} requires the compiled extension, but {reason}; "
                "install it (the spark-statestore-native wheel, or `make setup` in a checkout: "
                "it needs Rust and libleveldb-dev), or unset the variable"
            )
        _announce(setting, False, reason)
        return None
    _announce(setting, True, reason)
    return extension


def enabled() -> bool:
    """True when the fast paths are on (see :func:`module`)."""
    return module() is not None


def status() -> str:
    """One line saying which paths run here and why (for ``--version`` and reports)."""
    try:
        extension = module()
    except OptionError as exc:
        return f"unusable: {exc}"
    if extension is not None:
        return f"compiled fast paths: {_load()[1]}"
    setting = os.environ.get(ENV, "auto").strip().lower()
    if setting in _OFF:
        return f"pure-Python reference paths: {ENV}={os.environ.get(ENV)}"
    return f"pure-Python reference paths: the compiled extension is not used: {_load()[1]}"
