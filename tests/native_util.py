"""The compiled extension for tests: imported, or the test module skipped only when the
reference paths were asked for (``SPARK_STATESTORE_NATIVE=0``). A missing extension is a
failure otherwise: the README's setup builds it."""

from __future__ import annotations

import os
from types import ModuleType

import pytest
from hypothesis import strategies as st

from spark_statestore.native import ENV


def fast_paths_off() -> bool:
    """True when ``SPARK_STATESTORE_NATIVE`` turns the fast paths off for this run."""
    return os.environ.get(ENV, "auto").strip().lower() in ("0", "off", "false", "no")


def native_or_skip() -> ModuleType:
    """The ``spark_statestore_native`` module; skips the calling test module when
    ``SPARK_STATESTORE_NATIVE`` turns the fast paths off."""
    if fast_paths_off():
        pytest.skip(f"{ENV}=0: the pure-Python reference paths run", allow_module_level=True)
    import spark_statestore_native

    return spark_statestore_native


def stored_bytes() -> st.SearchStrategy[bytes]:
    """Values as a data key may hold them, for reads compared on both paths: any bytes, and
    bytes that start as an envelope of either version (or of the next) but may be cut short
    or give their headers any length."""
    return st.one_of(
        st.binary(max_size=40),
        st.tuples(st.sampled_from([b"\x00", b"\x01", b"\x02"]), st.binary(max_size=40)).map(
            lambda t: t[0] + t[1]
        ),
    )
