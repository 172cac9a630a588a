"""The changelog read into columns by the compiled extension's Kafka reader (the fast path of
:class:`~spark_statestore.connectors.kafka.follower.source.KafkaChangelogSource`).

The reader is librdkafka, as confluent-kafka is, with the same settings; what it returns per
poll is one set of Arrow buffers, the merged position of the records whose position headers
took the common path (a ``v`` = 0 header and a ``c`` header that decodes), and, with their
row indexes, the few records whose headers need the Python rules (malformed, unknown
versions) or carry headers besides ``v``/``c`` (kept with the record). The Python rules
then decide those records exactly as on the reference path, so errors, skips and warnings
are the same.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from spark_statestore.changelog.columns import RecordColumns
from spark_statestore.changelog.position_merger import PositionMerger
from spark_statestore.changelog.record import ChangelogRecord
from spark_statestore.connectors.kafka.errors import KafkaClientError
from spark_statestore.position import Position

__all__ = ["ColumnPoll", "NativeReader", "native_settings"]

_log = logging.getLogger(__name__)

NULL_KEY = "NULL_KEY"  # the reader's event for a record without a key


def native_settings(settings: Mapping[str, Any]) -> dict[str, str] | None:
    """``settings`` as librdkafka's strings, or None when one is not a plain value (a
    confluent-kafka callback such as ``error_cb``, ``oauth_cb``, ``logger``): those need
    confluent-kafka's client, so such a source reads on the reference path."""
    out: dict[str, str] = {}
    for name, value in settings.items():
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            out[name] = str(value)
        else:
            return None
    return out


@dataclass(frozen=True, slots=True)
class ColumnPoll:
    """One poll of the column reader, its headers already decided."""

    records: RecordColumns
    events: list[tuple[int, str, int, int, str]]
    """``(code, name, partition, offset, text)``: partition ends, offset resets, errors."""
    position: Position | None
    without_position: int
    skipped_positions: int
    headers: dict[int, tuple[tuple[str, bytes | None], ...]]
    next_offsets: dict[int, int]
    """``{partition: offset after its last record here}``."""


class NativeReader:
    """A read_committed reader of one changelog topic, handing out columns.

    Parameters
    ----------
    extension
        The compiled extension module.
    settings
        The consumer's settings (:func:`native_settings` of them must not be None).
    topic, on_missing
        The changelog topic and the rule for malformed position headers.
    """

    def __init__(
        self, extension: ModuleType, settings: Mapping[str, str], topic: str, on_missing: Any
    ) -> None:
        try:
            self._reader = extension.ColumnReader(list(settings.items()), topic)
        except ValueError as exc:
            raise KafkaClientError(
                f"the Kafka client refused the consumer settings for changelog {topic!r}: "
                f"{exc}; check the kafka.* options"
            ) from exc
        self._topic = topic
        self._on_missing = on_missing

    def assign(self, starts: Mapping[int, int]) -> None:
        try:
            self._reader.assign(list(starts.items()))
        except RuntimeError as exc:
            raise KafkaClientError(f"changelog {self._topic!r}: {exc}") from exc

    def poll(self, max_records: int, timeout_s: float, fill: bool) -> ColumnPoll:
        (
            rows,
            keys,
            values,
            partitions,
            offsets,
            timestamps,
            events,
            merged,
            without,
            slow,
            kept,
            next_offsets,
        ) = self._reader.poll(max_records, max(0, int(timeout_s * 1000)), fill)
        for _code, name, partition, offset, _text in events:
            if name == NULL_KEY:
                # Raises naming the record, as the reference path's decoding does.
                ChangelogRecord.from_parts(self._topic, partition, offset, None, None)
                raise KafkaClientError(
                    f"changelog {self._topic}-{partition} at offset {offset}: a record "
                    "without a key"
                )
        records = RecordColumns.from_buffers(rows, keys, values, partitions, offsets, timestamps)
        merger = PositionMerger(self._on_missing)
        if slow:
            parts = records.partitions
            record_offsets = records.offsets
            for row, headers in slow:
                merger.add(
                    headers,
                    self._topic,
                    parts[row].as_py(),
                    record_offsets[row].as_py(),
                )
        position = _merge(merged, merger.position())
        return ColumnPoll(
            records,
            events,
            position,
            without + merger.without,
            merger.skipped,
            {row: tuple(headers) for row, headers in kept},
            dict(next_offsets),
        )

    def close(self) -> None:
        self._reader.close()


def _merge(merged: Mapping[str, Mapping[int, int]], other: Position | None) -> Position | None:
    if not merged:
        return other
    position = Position.from_map({t: dict(p) for t, p in merged.items()})
    return position if other is None else position.merge(other)
