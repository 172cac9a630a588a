"""Position headers of changelog records (Kafka Streams' consistency information).

Kafka Streams, with its internal consistency option on, puts two headers on every changelog
record (``org.apache.kafka.streams.processor.internals.ChangelogRecordDeserializationHelper``):

- ``v``: one byte, the changelog format version; 0 means "the record carries a position";
- ``c``: the store's :class:`~spark_statestore.position.Position`, serialized by
  ``org.apache.kafka.streams.state.internals.PositionSerde`` (version 0, big-endian)::

      int8 version=0 | int32 topic count
      per topic:     int32 UTF-8 name length | name | int32 partition count
      per partition: int32 partition | int64 offset

``PositionSerde.serialize`` sizes its buffer in *bits* (``Byte.SIZE``, ``Integer.SIZE``,
``Long.SIZE``), so the bytes on the wire end with zero padding after the declared entries.
:func:`decode_position` therefore stops after the declared entries and ignores what follows.
"""

from __future__ import annotations

import enum
import logging
import struct
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from spark_statestore.changelog.errors import (
    ChangelogFormatError,
    MissingPositionHeaderError,
    PositionHeaderError,
)
from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.position import Position

__all__ = [
    "CONSISTENCY_VERSION",
    "POSITION_HEADER",
    "VERSION_HEADER",
    "HeaderDecision",
    "HeaderStatus",
    "PositionMerger",
    "decode_position",
    "encode_position",
    "position_from_headers",
    "position_headers",
    "read_position_headers",
]

_log = logging.getLogger(__name__)

VERSION_HEADER = "v"
"""Header key of the changelog format version (``CHANGELOG_VERSION_HEADER_KEY``)."""
POSITION_HEADER = "c"
"""Header key of the serialized Position (``CHANGELOG_POSITION_HEADER_KEY``)."""
CONSISTENCY_VERSION = 0
"""The only ``v`` value this module understands: the record carries a ``c`` header."""

_POSITION_SERDE_VERSION = 0
_VERSION_HEADER_VALUE = bytes([CONSISTENCY_VERSION])

_INT32 = struct.Struct(">i")
_PARTITION_OFFSET = struct.Struct(">iq")  # 12 bytes, no alignment padding with ">"
_MAX_INT32 = 2**31 - 1
_MAX_INT64 = 2**63 - 1
# Smallest possible encoding of one topic: name length, a one-byte name, partition count.
_MIN_TOPIC_BYTES = 4 + 1 + 4
_ENTRY_BYTES = _PARTITION_OFFSET.size

Headers = Iterable[tuple[str, bytes | None]]


# -- Position <-> bytes -------------------------------------------------------------------


def encode_position(position: Position, *, pad_like_kafka_streams: bool = False) -> bytes:
    """Serialize a position like Kafka Streams' ``PositionSerde`` (version 0).

    Parameters
    ----------
    position
        The position to encode. Topics are written in sorted order.
    pad_like_kafka_streams
        False (default) writes the exact bytes. True appends the trailing zero bytes that
        ``PositionSerde.serialize`` sends, because it sizes its buffer in bits: the result
        is ``8 + 32 + sum(32 + len(name) + 32 + 96 * partitions)`` bytes long. Readers must
        accept both; use True to reproduce Kafka Streams' wire bytes exactly.

    Returns
    -------
    bytes
        The value of a ``c`` header.

    Raises
    ------
    ChangelogFormatError
        If a partition does not fit an int32, an offset does not fit an int64, or a topic
        name is not encodable as UTF-8 (a lone surrogate).
    """
    # Grouped by topic in first-seen order: sorted for Positions from the named constructors.
    groups: dict[str, list[tuple[int, int]]] = {}
    for topic, partition, offset in position.entries:
        if not 0 <= partition <= _MAX_INT32 or not 0 <= offset <= _MAX_INT64:
            raise ChangelogFormatError(
                f"cannot encode position entry {topic}-{partition} at offset {offset}: the "
                f"partition must fit an int32 and the offset an int64, both >= 0"
            )
        group = groups.get(topic)
        if group is None:
            group = groups[topic] = []
        group.append((partition, offset))

    parts = [bytes([_POSITION_SERDE_VERSION]), _INT32.pack(len(groups))]
    padded_size = 8 + 32
    for topic, offsets in groups.items():
        try:
            name = topic.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ChangelogFormatError(
                f"cannot encode position topic {topic!r} as UTF-8: {exc.reason}"
            ) from exc
        if not name:
            raise ChangelogFormatError("cannot encode a position with an empty topic name")
        parts.append(_INT32.pack(len(name)))
        parts.append(name)
        parts.append(_INT32.pack(len(offsets)))
        parts.extend(_PARTITION_OFFSET.pack(p, o) for p, o in offsets)
        padded_size += 32 + len(name) + 32 + 96 * len(offsets)
    if pad_like_kafka_streams:
        parts.append(bytes(padded_size - sum(map(len, parts))))
    return b"".join(parts)


def decode_position(
    data: bytes | bytearray | memoryview | None,
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> Position:
    """Parse a ``c`` header value (``PositionSerde`` version 0).

    Decoding stops after the declared entries; trailing bytes of any value are ignored, as
    Kafka Streams does (its own writer pads with zeros). Everything else is strict.

    Parameters
    ----------
    data
        The header value.
    topic, partition, offset
        The changelog record's location, only used in error messages.

    Returns
    -------
    Position
        The decoded position (entries sorted, one per topic-partition).

    Raises
    ------
    PositionHeaderError
        On a missing value, an unknown serde version, truncated data (a count or length
        running past the end), negative or impossible counts, an empty or non-UTF-8 topic
        name, a negative partition or offset, or the same topic-partition listed twice with
        different offsets. No other exception escapes for bytes-like input.
    """
    try:
        return _decode_position(data)
    except PositionHeaderError as exc:
        if topic is None and partition is None and offset is None:
            raise
        raise exc.at(topic, partition, offset) from exc.__cause__


def _decode_entries(
    data: bytes | bytearray | memoryview | None,
) -> list[tuple[str, int, int]]:
    """The sorted, unique ``(topic, partition, offset)`` entries of a ``c`` header value."""
    if data is None:
        raise PositionHeaderError("position header 'c' has no value (null)")
    if not isinstance(data, (bytes, bytearray)):
        try:
            data = bytes(memoryview(data))
        except TypeError:
            raise PositionHeaderError(
                f"position header 'c' must be bytes, got {type(data).__name__}"
            ) from None
    size = len(data)
    if size == 0:
        raise PositionHeaderError("position header 'c' is empty")
    version = data[0]
    if version != _POSITION_SERDE_VERSION:
        raise PositionHeaderError(
            f"position header 'c' has unknown PositionSerde version {version} (this reader "
            f"understands version {_POSITION_SERDE_VERSION}); upgrade spark-statestore"
        )
    if size < 5:
        raise _truncated("the topic count", 1, size)
    (topics,) = _INT32.unpack_from(data, 1)
    if topics <= 0:
        if topics == 0:
            return []
        raise PositionHeaderError(f"position header 'c' has a negative topic count {topics}")
    pos = 5
    # Reject hostile counts before looping: each topic needs at least _MIN_TOPIC_BYTES.
    if topics * _MIN_TOPIC_BYTES > size - pos:
        raise PositionHeaderError(
            f"position header 'c' declares {topics} topics but only {size - pos} bytes "
            f"follow (truncated or corrupt)"
        )
    entries: list[tuple[str, int, int]] = []
    for _ in range(topics):
        if pos + 4 > size:
            raise _truncated("a topic name length", pos, size)
        (name_length,) = _INT32.unpack_from(data, pos)
        pos += 4
        if name_length <= 0:
            raise PositionHeaderError(
                f"position header 'c' has an invalid topic name length {name_length} at "
                f"byte {pos - 4} (a topic name is never empty)"
            )
        name_end = pos + name_length
        if name_end + 4 > size:
            raise _truncated(f"a topic name of {name_length} bytes", pos, size)
        try:
            name = data[pos:name_end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PositionHeaderError(
                f"position header 'c' has a topic name that is not valid UTF-8 at byte {pos}"
            ) from exc
        (count,) = _INT32.unpack_from(data, name_end)
        pos = name_end + 4
        if count < 0:
            raise PositionHeaderError(
                f"position header 'c' has a negative partition count {count} for topic {name!r}"
            )
        end = pos + count * _ENTRY_BYTES
        if end > size:
            raise _truncated(f"{count} partition offsets of topic {name!r}", pos, size)
        if count == 1:
            p, o = _PARTITION_OFFSET.unpack_from(data, pos)
            if p < 0 or o < 0:
                raise _negative(name, p, o)
            entries.append((name, p, o))
        else:
            for p, o in _PARTITION_OFFSET.iter_unpack(memoryview(data)[pos:end]):
                if p < 0 or o < 0:
                    raise _negative(name, p, o)
                entries.append((name, p, o))
        pos = end
    if len(entries) > 1:
        entries.sort()
        entries = _drop_duplicates(entries)
    return entries


def _decode_position(data: bytes | bytearray | memoryview | None) -> Position:
    # Entries are validated by _decode_entries exactly as Position.from_map validates them
    # (non-empty topic, partition and offset >= 0, offset within int64) and sorted.
    return Position(tuple(_decode_entries(data)))


def _drop_duplicates(entries: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    unique = [entries[0]]
    for entry in entries[1:]:
        previous = unique[-1]
        if entry[0] == previous[0] and entry[1] == previous[1]:
            if entry[2] != previous[2]:
                raise PositionHeaderError(
                    f"position header 'c' lists {entry[0]}-{entry[1]} twice with different "
                    f"offsets ({previous[2]} and {entry[2]})"
                )
            continue
        unique.append(entry)
    return unique


def _truncated(what: str, at: int, size: int) -> PositionHeaderError:
    return PositionHeaderError(
        f"position header 'c' is truncated: {what} at byte {at} runs past its end ({size} bytes)"
    )


def _negative(topic: str, partition: int, offset: int) -> PositionHeaderError:
    return PositionHeaderError(
        f"position header 'c' has a negative partition or offset for topic {topic!r}: "
        f"partition {partition}, offset {offset}"
    )


# -- header rules -------------------------------------------------------------------------


class HeaderStatus(enum.Enum):
    """What the position headers of one changelog record said."""

    NO_POSITION = "no_position"
    """No ``v`` header: written without consistency information (not an error)."""
    POSITION = "position"
    """``v`` = 0 and a valid ``c`` header: :attr:`HeaderDecision.position` is set."""
    SKIPPED = "skipped"
    """Malformed or missing position headers, skipped under ``OnMissingPosition.SKIP``."""
    UNKNOWN_VERSION = "unknown_version"
    """A ``v`` this reader does not understand: the position is ignored (warned once)."""


@dataclass(frozen=True, slots=True)
class HeaderDecision:
    """The outcome of applying the header rules to one record.

    Attributes
    ----------
    status
        Which rule applied.
    position
        The decoded position when ``status`` is ``POSITION``, else None.
    version
        The ``v`` byte when present (and non-empty), else None.
    error
        Why the headers were skipped when ``status`` is ``SKIPPED``, else None.
    """

    status: HeaderStatus
    position: Position | None = None
    version: int | None = None
    error: ChangelogFormatError | None = None

    @property
    def skipped(self) -> bool:
        """True when a malformed position was skipped (count it)."""
        return self.status is HeaderStatus.SKIPPED


_NO_POSITION = HeaderDecision(HeaderStatus.NO_POSITION)
_warned_versions: set[int] = set()
_unknown_decisions: dict[int, HeaderDecision] = {}
_warned_lock = threading.Lock()


def _unknown_version(version: int) -> HeaderDecision:
    # Warn once per process and version: a changelog written by a newer Kafka Streams would
    # otherwise log once per record. The lock only guards the first sighting.
    decision = _unknown_decisions.get(version)
    if decision is not None and version in _warned_versions:
        return decision
    decision = HeaderDecision(HeaderStatus.UNKNOWN_VERSION, version=version)
    _unknown_decisions[version] = decision
    with _warned_lock:
        if version in _warned_versions:
            return decision
        _warned_versions.add(version)
    _log.warning(
        "changelog records carry position header version v=%d, larger than this reader "
        "understands (%d); their positions are ignored. Upgrade spark-statestore to read them.",
        version,
        CONSISTENCY_VERSION,
    )
    return decision


def _forget_warned_versions() -> None:
    """Forget which unknown versions were warned about (for tests)."""
    with _warned_lock:
        _warned_versions.clear()


def read_position_headers(
    headers: Headers | None,
    *,
    on_missing: OnMissingPosition = OnMissingPosition.FAIL,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> HeaderDecision:
    """Apply Kafka Streams' position header rules to one record's headers.

    The rules of ``ChangelogRecordDeserializationHelper``: the *last* ``v`` and the *last*
    ``c`` header win (``headers.lastHeader``); other headers are ignored.

    - no ``v``: no position (``NO_POSITION``), not an error;
    - ``v`` with a null or empty value: malformed;
    - ``v`` = 0: ``c`` is decoded (``POSITION``); a missing ``c`` or one that does not decode
      is an error, as in Kafka Streams;
    - any other ``v``: warn once per process and version, ignore the position
      (``UNKNOWN_VERSION``). Like Kafka Streams only the first byte of ``v`` counts.

    Parameters
    ----------
    headers
        ``(key, value)`` pairs as confluent-kafka's ``Message.headers()`` returns them, or
        None for a record without headers.
    on_missing
        ``FAIL`` (default) raises on malformed or missing position headers; ``SKIP``
        returns a ``SKIPPED`` decision carrying the error, so the caller can count it.
    topic, partition, offset
        The record's location, used in error messages.

    Returns
    -------
    HeaderDecision

    Raises
    ------
    MissingPositionHeaderError
        ``v`` = 0 without a ``c`` header (only with ``OnMissingPosition.FAIL``).
    PositionHeaderError
        A malformed ``v`` or ``c`` header (only with ``OnMissingPosition.FAIL``).
    OptionError
        If ``on_missing`` is not an :class:`OnMissingPosition`.
    """
    OnMissingPosition.check(on_missing)
    if not headers:
        return _NO_POSITION
    version_value: bytes | None = None
    position_value: bytes | None = None
    has_version = has_position = False
    for key, value in headers:
        if key == VERSION_HEADER:
            version_value, has_version = value, True
        elif key == POSITION_HEADER:
            position_value, has_position = value, True
    if not has_version:
        return _NO_POSITION

    error: ChangelogFormatError
    version = version_value[0] if version_value else None
    if not isinstance(version, int):
        error = PositionHeaderError(
            f"position version header 'v' must be one byte, got {version_value!r}",
            topic=topic,
            partition=partition,
            offset=offset,
        )
        return _fail(error, on_missing, None)
    if version != CONSISTENCY_VERSION:
        return _unknown_version(version)
    if not has_position:
        error = MissingPositionHeaderError(
            "record has position version header v=0 but no position header 'c' (Kafka "
            "Streams: consistency is enabled but the changelog contains records without "
            "consistency information)",
            topic=topic,
            partition=partition,
            offset=offset,
        )
        return _fail(error, on_missing, version)
    try:
        position = _decode_position(position_value)
    except PositionHeaderError as exc:
        located = exc.at(topic, partition, offset)
        if on_missing is OnMissingPosition.FAIL:
            raise located from exc.__cause__
        return HeaderDecision(HeaderStatus.SKIPPED, version=version, error=located)
    return HeaderDecision(HeaderStatus.POSITION, position, version)


def _fail(
    error: ChangelogFormatError, on_missing: OnMissingPosition, version: int | None
) -> HeaderDecision:
    if on_missing is OnMissingPosition.FAIL:
        raise error
    return HeaderDecision(HeaderStatus.SKIPPED, version=version, error=error)


def position_from_headers(
    headers: Headers | None,
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> Position | None:
    """The position a record's headers carry, or None (strict header rules).

    Shorthand for ``read_position_headers(headers, ...).position``: None
    when there is no ``v`` header or ``v`` is an unknown version.

    Raises
    ------
    PositionHeaderError
        Malformed or missing position headers (see :func:`read_position_headers`).
    """
    return read_position_headers(headers, topic=topic, partition=partition, offset=offset).position


def position_headers(position: Position) -> list[tuple[str, bytes]]:
    """The headers a writer puts on a changelog record: ``[("v", b"\\x00"), ("c", ...)]``.

    ``c`` is encoded without Kafka Streams' trailing padding; every reader, Kafka Streams
    included, accepts it.

    Raises
    ------
    ChangelogFormatError
        If the position cannot be encoded (see :func:`encode_position`).
    """
    return [(VERSION_HEADER, _VERSION_HEADER_VALUE), (POSITION_HEADER, encode_position(position))]


_ONE = b"\x00\x00\x00\x01"  # an int32 count of 1, big-endian
_SINGLE_TOPIC = bytes([_POSITION_SERDE_VERSION]) + _ONE  # serde version 0, one topic
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
                    entries = _decode_entries(position_value)
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
                entries = _decode_entries(data)
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
