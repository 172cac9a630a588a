"""Position headers of changelog records (Kafka Streams' consistency information).

Kafka Streams, with its internal consistency option on, puts two headers on every changelog
record (``org.apache.kafka.streams.processor.internals.ChangelogRecordDeserializationHelper``):

- ``v``: one byte, the changelog format version; 0 means "the record carries a position";
- ``c``: the store's :class:`~spark_statestore.position.Position`, serialized by
  ``PositionSerde`` (:mod:`~spark_statestore.changelog.position_codec`).

This module holds the rules for reading them (:func:`read_position_headers`, as Kafka Streams
applies them) and writing them (:func:`position_headers`). The follower's bulk merge of many
records' headers, which applies the same rules on a fast path, is
:class:`~spark_statestore.changelog.position_merger.PositionMerger`.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from spark_statestore.changelog.errors import (
    ChangelogFormatError,
    MissingPositionHeaderError,
    PositionHeaderError,
)
from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.changelog.position_codec import decode_position, encode_position
from spark_statestore.position import Position

__all__ = [
    "CONSISTENCY_VERSION",
    "POSITION_HEADER",
    "VERSION_HEADER",
    "HeaderDecision",
    "HeaderStatus",
    "Headers",
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

_VERSION_HEADER_VALUE = bytes([CONSISTENCY_VERSION])

Headers = Iterable[tuple[str, bytes | None]]
"""A record's headers as confluent-kafka gives them: ``(key, value)`` pairs."""


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
        position = decode_position(position_value)
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
