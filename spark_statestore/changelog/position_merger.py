"""The follower's bulk merge of many changelog records' position headers.

:class:`PositionMerger` applies :func:`~spark_statestore.changelog.headers.read_position_headers`'
rules on a fast path and hands every other case to it, so both agree on every input (a
property test holds them side by side).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from spark_statestore.changelog.errors import PositionHeaderError
from spark_statestore.changelog.headers import (
    CONSISTENCY_VERSION,
    POSITION_HEADER,
    VERSION_HEADER,
    Headers,
    HeaderStatus,
    read_position_headers,
)
from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.changelog.position_codec import SERDE_VERSION, decode_entries
from spark_statestore.position import Position

__all__ = ["PositionMerger"]

_INT32 = struct.Struct(">i")
_ONE = b"\x00\x00\x00\x01"  # an int32 count of 1, big-endian
_SINGLE_TOPIC = bytes([SERDE_VERSION]) + _ONE  # serde version 0, one topic
_NAME_LENGTH_END = len(_SINGLE_TOPIC) + _INT32.size  # the first topic's name length ends here
_SINGLE_LAYOUTS: dict[int, struct.Struct] = {}  # name length -> name, count, partition, offset
_MAX_CACHED_NAME = 249  # Kafka topic names have at most 249 characters


def _single_topic_name_length(data: bytes) -> int:
    """The first topic's name length in a ``c`` value that starts with serde version 0 and a
    topic count of 1; -1 for any other value, or one too short to hold that length (the full
    decoder names what is wrong with it)."""
    if len(data) < _NAME_LENGTH_END or data[: len(_SINGLE_TOPIC)] != _SINGLE_TOPIC:
        return -1
    length: int = _INT32.unpack_from(data, len(_SINGLE_TOPIC))[0]
    return length


class PositionMerger:
    """Merges the positions in many records' headers, without a Position per record.

    The follower needs only the merge of a chunk's positions (the maximum offset per input
    topic-partition), not each record's: this applies :func:`read_position_headers`' rules
    on the fast path (one ``v`` = 0 and a well-formed ``c``) and hands every other case to
    it, so errors, skips and unknown versions behave exactly the same.

    Parameters
    ----------
    on_missing
        As in :func:`read_position_headers`.
    """

    __slots__ = (
        "_heads",
        "_last_entries",
        "_last_raw",
        "_offsets",
        "on_missing",
        "skipped",
        "without",
    )

    def __init__(self, on_missing: OnMissingPosition = OnMissingPosition.FAIL) -> None:
        self.on_missing = OnMissingPosition.check(on_missing)
        self._offsets: dict[tuple[str, int], int] = {}
        self._heads: dict[tuple[bytes, int], tuple[str, int]] = {}
        self._last_raw: bytes | None = None
        self._last_entries: list[tuple[str, int, int]] = []
        self.skipped = 0
        """Records whose malformed position headers were skipped (``OnMissingPosition.SKIP``)."""
        self.without = 0
        """Records without a position (no ``v`` header, or an unknown version)."""

    def add(self, headers: Headers | None, topic: str, partition: int, offset: int) -> None:
        """Merge one record's position (its headers as ``Message.headers()`` gives them).

        Raises
        ------
        PositionHeaderError
            As :func:`read_position_headers` with ``OnMissingPosition.FAIL``.
        """
        if not headers:
            self.without += 1
            return
        version_value = position_value = None
        for key, value in headers:
            if key == VERSION_HEADER:
                version_value = value
            elif key == POSITION_HEADER:
                position_value = value
        if version_value is None and not any(key == VERSION_HEADER for key, _ in headers):
            self.without += 1
            return
        entries = None
        if version_value and version_value[0] == CONSISTENCY_VERSION and position_value:
            if self._add_single(position_value):
                return
            if position_value == self._last_raw:
                entries = self._last_entries
            else:
                try:
                    entries = decode_entries(position_value)
                except PositionHeaderError:
                    entries = None
                else:
                    self._last_raw, self._last_entries = bytes(position_value), entries
        if entries is None:
            self._slow(headers, topic, partition, offset)
            return
        offsets = self._offsets
        for name, p, o in entries:
            if o > offsets.get((name, p), -1):
                offsets[(name, p)] = o

    def add_all(
        self,
        all_headers: Sequence[Sequence[tuple[str, bytes | None]] | None],
        topic: str,
        rows: Sequence[Sequence[Any]],
    ) -> None:
        """:meth:`add` for many records at once; ``rows[i]`` holds record ``i``'s partition
        and offset at indexes 2 and 3 (the follower's rows), for error messages.

        The common case — one topic and one partition, the same name length and an already
        checked topic-partition as the record before — costs one ``struct`` call and no
        function call per record; everything else goes through :meth:`add`.
        """
        offsets, heads = self._offsets, self._heads
        layout: struct.Struct | None = None  # ">i{n}siiq": name length, name, count, p, o
        name_length = minimum = -1
        last: tuple[bytes, int] | None = None
        seen: tuple[str, int] | None = None
        for i, headers in enumerate(all_headers):
            if headers:
                version_value = position_value = None
                if (
                    len(headers) == 2
                    and headers[0][0] == VERSION_HEADER
                    and headers[1][0] == POSITION_HEADER
                ):
                    # Kafka Streams writes exactly these two, in this order.
                    version_value, position_value = headers[0][1], headers[1][1]
                else:
                    for key, value in headers:
                        if key == VERSION_HEADER:
                            version_value = value
                        elif key == POSITION_HEADER:
                            position_value = value
                if (
                    layout is not None
                    and version_value
                    and position_value
                    and version_value[0] == CONSISTENCY_VERSION
                    and position_value[:5] == _SINGLE_TOPIC
                    and len(position_value) >= minimum
                ):
                    length, name, count, partition, offset = layout.unpack_from(position_value, 5)
                    if length == name_length and count == 1 and offset >= 0:
                        if last != (name, partition):
                            last = (name, partition)
                            seen = heads.get(last)
                        if seen is not None:
                            if offset > offsets.get(seen, -1):
                                offsets[seen] = offset
                            continue
                # Prime the layout for this record's name length (add() checks the record).
                if position_value:
                    length = _single_topic_name_length(position_value)
                    if 0 < length <= _MAX_CACHED_NAME and length != name_length:
                        name_length, minimum = length, 25 + length
                        layout = struct.Struct(f">i{length}siiq")
                        last = seen = None
            row = rows[i]
            self.add(headers, topic, row[2], row[3])
            last = None  # add() may have checked (and cached) this topic-partition

    def _add_single(self, data: bytes) -> bool:
        """The common case of one topic with one partition, without a full decode.

        One ``struct`` call reads name, partition count, partition and offset; the topic
        name and partition are checked by the full decoder once per distinct value (cached),
        only the offset per record. False: use the full decoder.
        """
        name_length = _single_topic_name_length(data)
        if name_length <= 0 or len(data) < 25 + name_length:
            return False
        layout = _SINGLE_LAYOUTS.get(name_length)
        if layout is None:
            layout = struct.Struct(f">{name_length}siiq")
            if len(_SINGLE_LAYOUTS) < 256:
                _SINGLE_LAYOUTS[name_length] = layout
        name_bytes, count, partition, offset = layout.unpack_from(data, 9)
        if count != 1 or offset < 0:
            return False  # the full decoder handles (or names) it
        key = self._heads.get((name_bytes, partition))
        if key is None:
            try:
                entries = decode_entries(data)
            except PositionHeaderError:
                return False
            key = (entries[0][0], entries[0][1])
            if len(self._heads) < 1024:
                self._heads[(name_bytes, partition)] = key
        if offset > self._offsets.get(key, -1):
            self._offsets[key] = offset
        return True

    def _slow(self, headers: Headers, topic: str, partition: int, offset: int) -> None:
        decision = read_position_headers(
            headers, on_missing=self.on_missing, topic=topic, partition=partition, offset=offset
        )
        if decision.status is HeaderStatus.SKIPPED:
            self.skipped += 1
        elif decision.position is None:
            self.without += 1
        else:
            for name, p, o in decision.position.entries:
                if o > self._offsets.get((name, p), -1):
                    self._offsets[(name, p)] = o

    def position(self) -> Position | None:
        """The merged position of every record added so far (None if none had one)."""
        if not self._offsets:
            return None
        merged: dict[str, dict[int, int]] = {}
        for (name, p), o in self._offsets.items():
            merged.setdefault(name, {})[p] = o
        return Position.from_map(merged)
