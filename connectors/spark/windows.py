"""Window and session store keys as columns, for the change feed and the snapshot reader.

Kafka Streams logs a window store's records under ``user key | int64 window start | int32
seqnum`` and a session store's under ``user key | int64 session end | int64 session start``
(:mod:`spark_statestore.changelog.keys`). With ``storeType`` ``window`` or ``session`` both
surfaces split that key: ``key`` is the user key (decoded by ``keyFormat``), and

- ``window``: ``window_start``, and ``window_end`` (start + ``windowSizeMs``: the changelog
  does not carry the window size) when the size is known;
- ``session``: ``session_start`` and ``session_end`` (both in the key; the end is the
  timestamp of the session's last record, inclusive, as Kafka Streams' ``SessionWindow``).

A key that does not split follows ``mode``: FAILFAST raises a
:class:`~spark_statestore.connectors.spark.errors.DecodeError` naming the record, PERMISSIVE
gives nulls in the key and window columns and counts it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_statestore.changelog.errors import ChangelogFormatError
from spark_statestore.changelog.keys import decode_session_key, decode_window_key
from spark_statestore.connectors.spark.errors import DecodeError
from spark_statestore.connectors.spark.option_table import StoreType
from spark_statestore.errors import OptionError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "WINDOWED",
    "SplitKeys",
    "check_window_size",
    "split_keys",
    "window_columns",
    "window_ddl",
]

WINDOWED = frozenset({StoreType.WINDOW, StoreType.SESSION})
"""The store types whose changelog keys carry a window."""


def check_window_size(size: int | None, store_type: StoreType, required: bool) -> int | None:
    """The ``windowSizeMs`` option: only for window stores; ``required`` by the reader's data
    view (its ``window_end`` column).

    Raises
    ------
    OptionError
        Given for another store type, or missing where required.
    """
    if size is not None and store_type is not StoreType.WINDOW:
        raise OptionError(
            f"option 'windowSizeMs' is the size of a window store's windows; storeType is "
            f"{store_type.value!r}: drop windowSizeMs, or set storeType 'window'"
        )
    if size is None and required and store_type is StoreType.WINDOW:
        raise OptionError(
            "option 'windowSizeMs' is required with storeType 'window': the changelog "
            "carries each window's start, not its size, so window_end = window_start + "
            "windowSizeMs (the size the Kafka Streams app gave TimeWindows.ofSize...)"
        )
    return size


def window_ddl(store_type: StoreType, window_size_ms: int | None) -> list[str]:
    """The window columns of ``store_type`` as DDL (none for key-value stores)."""
    if store_type is StoreType.WINDOW:
        return ["window_start TIMESTAMP"] + (
            [] if window_size_ms is None else ["window_end TIMESTAMP"]
        )
    if store_type is StoreType.SESSION:
        return ["session_start TIMESTAMP", "session_end TIMESTAMP"]
    return []


@dataclass(frozen=True, slots=True)
class SplitKeys:
    """Stored keys split into user keys and windows (None where a key did not split)."""

    keys: list[bytes | None]
    starts: list[int | None]
    ends: list[int | None]
    undecodable: int


def split_keys(
    raw: Sequence[bytes | None],
    store_type: StoreType,
    window_size_ms: int | None,
    *,
    locate: Callable[[int], str],
    permissive: bool,
) -> SplitKeys:
    """Split window or session store keys.

    ``ends`` of a window store are start + ``window_size_ms`` (None without a size).

    Raises
    ------
    DecodeError
        In FAILFAST mode, for the first key that does not split, naming it with
        ``locate(i)`` (the store or topic, partition and offset).
    """
    session = store_type is StoreType.SESSION
    keys: list[bytes | None] = []
    starts: list[int | None] = []
    ends: list[int | None] = []
    bad = 0
    for index, key in enumerate(raw):
        try:
            if key is None:
                raise ChangelogFormatError("the record has no key")
            if session:
                split = decode_session_key(key)
                keys.append(split.key)
                starts.append(split.window_start)
                ends.append(split.window_end)
                continue
            windowed = decode_window_key(key)
        except ChangelogFormatError as exc:
            if not permissive:
                raise DecodeError(
                    f"{locate(index)}: {exc} (storeType is {store_type.value!r}; read this "
                    "store with the storeType it has, or with mode PERMISSIVE to get nulls)",
                    index=index,
                ) from None
            bad += 1
            keys.append(None)
            starts.append(None)
            ends.append(None)
            continue
        keys.append(windowed.key)
        starts.append(windowed.window_start)
        ends.append(None if window_size_ms is None else windowed.window_start + window_size_ms)
    return SplitKeys(keys, starts, ends, bad)


def window_columns(
    split: SplitKeys, store_type: StoreType, window_size_ms: int | None
) -> dict[str, pa.Array]:
    """The window columns of :func:`window_ddl` as Arrow arrays (UTC milliseconds)."""
    import pyarrow as pa

    millis = pa.timestamp("ms", tz="UTC")
    if store_type is StoreType.SESSION:
        return {
            "session_start": pa.array(split.starts, millis),
            "session_end": pa.array(split.ends, millis),
        }
    columns = {"window_start": pa.array(split.starts, millis)}
    if window_size_ms is not None:
        columns["window_end"] = pa.array(split.ends, millis)
    return columns
