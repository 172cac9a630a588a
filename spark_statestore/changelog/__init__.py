"""Changelog records and the Kafka Streams changelog wire format.

Position headers: the ``c`` value's codec (``position_codec``), the ``v``/``c`` rules
(``headers``) and the follower's bulk merge of them (``position_merger``); window and session
key layouts, timestamped values and Kafka's murmur2 partitioner. Stdlib only: no Spark, no Kafka
client.
"""

from __future__ import annotations

from spark_statestore.changelog.errors import (
    ChangelogFormatError,
    MissingPositionHeaderError,
    PartitionerError,
    PositionHeaderError,
)
from spark_statestore.changelog.headers import (
    HeaderDecision,
    HeaderStatus,
    position_from_headers,
    position_headers,
    read_position_headers,
)
from spark_statestore.changelog.keys import (
    SessionKey,
    WindowedKey,
    decode_session_key,
    decode_window_key,
    encode_session_key,
    encode_window_key,
)
from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.changelog.partitioner import (
    murmur2,
    partition_for_key,
    partitions_for_keys,
    to_positive,
)
from spark_statestore.changelog.position_codec import decode_position, encode_position
from spark_statestore.changelog.position_merger import PositionMerger
from spark_statestore.changelog.record import ChangelogRecord, TimestampType
from spark_statestore.changelog.timestamped import (
    decode_value_and_timestamp,
    encode_value_and_timestamp,
    timestamped_from_changelog,
)

__all__ = [
    "ChangelogFormatError",
    "ChangelogRecord",
    "HeaderDecision",
    "HeaderStatus",
    "MissingPositionHeaderError",
    "OnMissingPosition",
    "PartitionerError",
    "PositionHeaderError",
    "PositionMerger",
    "SessionKey",
    "TimestampType",
    "WindowedKey",
    "decode_position",
    "decode_session_key",
    "decode_value_and_timestamp",
    "decode_window_key",
    "encode_position",
    "encode_session_key",
    "encode_value_and_timestamp",
    "encode_window_key",
    "murmur2",
    "partition_for_key",
    "partitions_for_keys",
    "position_from_headers",
    "position_headers",
    "read_position_headers",
    "timestamped_from_changelog",
    "to_positive",
]
