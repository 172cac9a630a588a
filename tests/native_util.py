"""The compiled extension for tests: imported, or the test module skipped only when the
reference paths were asked for (``SPARK_STATESTORE_NATIVE=0``). A missing extension is a
failure otherwise: the README's setup builds it."""

from __future__ import annotations

import os
from types import ModuleType

import pytest

from spark_statestore.native import ENV


def native_or_skip() -> ModuleType:
    """The ``spark_statestore_native`` module; skips the calling test module when
    ``SPARK_STATESTORE_NATIVE`` turns the fast paths off."""
    if os.environ.get(ENV, "auto").strip().lower() in ("0", "off", "false", "no"):
        pytest.skip(f"{ENV}=0: the pure-Python reference paths run", allow_module_level=True)
    import spark_statestore_native

    return spark_statestore_native
