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

from spark_statestore.changelog.columns import RecordColumns, arrow_array
from spark_statestore.changelog.position_merger import PositionMerger
from spark_statestore.changelog.record import ChangelogRecord
from spark_statestore.connectors.kafka import logs
from spark_statestore.connectors.kafka.errors import KafkaClientError
from spark_statestore.position import Position

__all__ = ["ColumnPoll", "NativeReader", "native_settings"]

_log = logging.getLogger(__name__)

NULL_KEY = "NULL_KEY"  # the reader's event for a record without a key


def native_settings(settings: Mapping[str, Any]) -> dict[str, str] | None:
    """``settings`` as librdkafka's strings, or None when one is not a plain value (a
    confluent-kafka callback such as ``error_cb``, ``oauth_cb``, ``logger``): those need
    confluent-kafka's client, so such a source reads on the reference path. The extension's
    clients have no log callback: they are :func:`~.logs.quiet`."""
    out: dict[str, str] = {}
    for name, value in logs.quiet(settings).items():
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
    """``{partition: the consumer's position}``: past the records returned and the
    transaction markers after them."""


@dataclass(frozen=True, slots=True)
class FeedPoll:
    """One poll of the column reader for the change feed: each record with its own
    timestamp type and position."""

    records: RecordColumns
    timestamp_types: Any
    """int32 Arrow array (confluent-kafka's numbering)."""
    positions: Any
    """Arrow ``map<string, map<int32, int64>>``: each record's position (null without one,
    and for the records in ``slow``)."""
    slow: list[tuple[int, list[tuple[str, bytes | None]]]]
    """``(row, headers)`` of the records whose position headers need the Python rules."""
    events: list[tuple[int, str, int, int, str]]
    next_offsets: dict[int, int]
    """``{partition: the consumer's position}``: past the records and the markers after."""

    def head(self, rows: int) -> FeedPoll:
        """The first ``rows`` records (the slow ones among them)."""
        records = self.records
        return FeedPoll(
            RecordColumns(
                records.keys.slice(0, rows),
                records.values.slice(0, rows),
                records.partitions.slice(0, rows),
                records.offsets.slice(0, rows),
                records.timestamps.slice(0, rows),
            ),
            self.timestamp_types.slice(0, rows),
            self.positions.slice(0, rows),
            [(row, headers) for row, headers in self.slow if row < rows],
            self.events,
            self.next_offsets,
        )


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
        self._refuse_null_keys(events)
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

    def poll_feed(self, max_records: int, timeout_s: float) -> FeedPoll:
        """Up to ``max_records`` records for the change feed (waiting for a whole chunk at
        most ``timeout_s``), each with its own position."""
        import pyarrow as pa
        import pyarrow.compute as pc

        out = self._reader.poll(max_records, max(0, int(timeout_s * 1000)), True, True)
        rows, keys, values, partitions, offsets, timestamps, events = out[:7]
        slow, next_offsets, types, positions = out[9], out[11], out[12], out[13]
        self._refuse_null_keys(events)
        records = RecordColumns.from_buffers(rows, keys, values, partitions, offsets, timestamps)
        valid, row_offsets, (topic_offsets, topic_data), entry_offsets, parts, offs = positions
        topics = arrow_array(
            pa.string(), len(topic_offsets) // 4 - 1, None, topic_offsets, topic_data
        )
        inner = pa.MapArray.from_arrays(
            arrow_array(pa.int32(), len(entry_offsets) // 4, None, entry_offsets),
            arrow_array(pa.int32(), len(parts) // 4, None, parts),
            arrow_array(pa.int64(), len(offs) // 8, None, offs),
        )
        outer_offsets = arrow_array(pa.int32(), rows + 1, None, row_offsets)
        mask = None
        if valid is not None:
            mask = pc.invert(arrow_array(pa.bool_(), rows, None, valid))
        position_array = pa.MapArray.from_arrays(outer_offsets, topics, inner, mask=mask)
        return FeedPoll(
            records,
            arrow_array(pa.int32(), rows, None, types),
            position_array,
            list(slow),
            list(events),
            dict(next_offsets),
        )

    def _refuse_null_keys(self, events: list[tuple[int, str, int, int, str]]) -> None:
        for _code, name, partition, offset, _text in events:
            if name == NULL_KEY:
                # Raises naming the record, as the reference path's decoding does.
                ChangelogRecord.from_parts(self._topic, partition, offset, None, None)
                raise KafkaClientError(
                    f"changelog {self._topic}-{partition} at offset {offset}: a record "
                    "without a key"
                )

    def close(self) -> None:
        self._reader.close()


def _merge(merged: Mapping[str, Mapping[int, int]], other: Position | None) -> Position | None:
    if not merged:
        return other
    position = Position.from_map({t: dict(p) for t, p in merged.items()})
    return position if other is None else position.merge(other)
