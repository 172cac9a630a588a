"""The Kafka changelog source of the follower: a read_committed consumer tuned for throughput.

Implements :class:`spark_statestore.follower.ChangelogSource` with confluent-kafka. It never
commits consumer offsets (the store records what it applied) and never produces.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from spark_statestore import native
from spark_statestore.changelog.headers import POSITION_HEADER, VERSION_HEADER
from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.changelog.position_merger import PositionMerger
from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import KafkaClientError
from spark_statestore.connectors.kafka.follower.columns import NativeReader, native_settings
from spark_statestore.connectors.kafka.lost_offsets import handle_out_of_range
from spark_statestore.connectors.kafka.tail import message_to_record
from spark_statestore.errors import PositionUnavailableError
from spark_statestore.follower import PollResult, Row
from spark_statestore.query import LagInfo

__all__ = [
    "READ_AHEAD_BYTES",
    "READ_AHEAD_RECORDS",
    "KafkaChangelogSource",
    "changelog_lags",
    "handle_out_of_range",
    "kept_headers",
    "read_ahead_settings",
]

_log = logging.getLogger(__name__)
_POSITION_HEADERS = frozenset({VERSION_HEADER, POSITION_HEADER})

_INVALID_OFFSET = -1001  # librdkafka's RD_KAFKA_OFFSET_INVALID

READ_AHEAD_BYTES = 16 * 1024 * 1024
"""What the consumer may buffer ahead of the follower, in fetched (compressed) bytes over
all its partitions together. librdkafka's limits are per partition (64 MiB each by
default), so they are this budget divided by the partitions read;
``kafka.queued.max.messages.kbytes`` overrides it."""
READ_AHEAD_RECORDS = 200_000
"""What the consumer may buffer ahead of the follower, in records over all its partitions
together (librdkafka's ``queued.min.messages``, 100,000 per partition by default;
``kafka.queued.min.messages`` overrides it). Bytes alone do not bound memory: a fetched
record costs librdkafka a few hundred bytes besides its compressed share, so 16 MiB of
well-compressed small records held about 150 MiB. Four chunks of the follower's default
50,000 records keep the restore's rate."""
_MIN_PARTITION_KIB = 256
_MIN_PARTITION_RECORDS = 1_000

_VERSIONED_LAG_MS = 86_400_000
"""Kafka Streams sets a versioned store changelog's min.compaction.lag.ms to the history
retention plus this (``VersionedChangelogTopicConfig``); other changelogs keep Kafka's 0."""

_READER_DEFAULTS: dict[str, Any] = {
    "auto.offset.reset": "error",  # a lost offset is data loss, not a silent reset
    "fetch.max.bytes": 32 * 1024 * 1024,
    # librdkafka postpones fetching a partition by this much whenever its queue is past the
    # read-ahead budget (1000 ms by default): a restore that drains chunk by chunk stalled
    # on it every time, at half its rate. Fetch again as soon as there is room.
    "fetch.queue.backoff.ms": 0,
}


class KafkaChangelogSource:
    """Reads one changelog topic with ``isolation.level=read_committed``.

    Parameters
    ----------
    bootstrap_servers
        Kafka bootstrap servers.
    topic
        The changelog topic.
    config
        Extra consumer settings (Spark's ``kafka.*`` options without the prefix); they
        override the defaults here, except the isolation level, which must stay
        read_committed.
    on_missing_position
        A record with ``v``=0 and no valid ``c`` header: fail (the default) or skip its
        position.
    timeout_s
        Timeout of metadata and offset requests.
    fail_on_data_loss
        When offsets the store still needs are gone from the topic: True raises
        :class:`DataLossError`; False skips ahead to the earliest available offset, logs a
        warning and counts the skipped offsets in :attr:`lost_offsets`.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        config: Mapping[str, Any] | None = None,
        on_missing_position: OnMissingPosition = OnMissingPosition.FAIL,
        timeout_s: float = 30.0,
        fail_on_data_loss: bool = True,
    ) -> None:
        self._topic = topic
        self._timeout_s = timeout_s
        self._on_missing = OnMissingPosition.check(on_missing_position, "on_missing_position")
        self._bootstrap = bootstrap_servers
        self._group = f"spark-statestore-follower-{topic}"
        self._user = dict(config or {})
        # The reading consumer is made by assign(), which knows how many partitions share
        # the read-ahead budget.
        self._consumer: Consumer | None = None
        # The compiled extension's column reader, when the fast paths are on and the
        # settings are plain values (a confluent-kafka callback keeps the reference path).
        self._extension = native.module()
        self._native: NativeReader | None = None
        # Metadata and offset queries come from other threads (lag, Spark's latestOffset)
        # while the follower thread blocks in consume(): they get their own client. Made
        # here, it also refuses bad settings (another isolation level) at once. Nothing
        # polls it, so its librdkafka lines are kept quiet.
        self._offsets_client = self._client(f"{self._group}-offsets", self._user, quiet=True)
        self._offsets_lock = threading.Lock()
        self._assigned: list[int] = []
        self._positions: dict[int, int] = {}
        self._fail_on_data_loss = fail_on_data_loss
        self._batches: Any = None  # a KafkaBatchProgress, or False: not a sink's changelog
        self.lost_offsets: dict[int, int] = {}
        """``{partition: offsets skipped}`` because they were gone (``fail_on_data_loss``
        False)."""

    @property
    def topic(self) -> str:
        return self._topic

    def partition_count(self) -> int:
        with self._offsets_lock:
            count = clients.partition_count(self._offsets_client, self._topic, self._timeout_s)
        if count is None:
            raise KafkaClientError(
                f"changelog topic {self._topic!r} does not exist; check the topic name and "
                "kafka.bootstrap.servers"
            )
        return count

    def batch_progress(self) -> Any:
        """The progress of whole batches (a
        :class:`~spark_statestore.connectors.kafka.follower.batches.KafkaBatchProgress`) when
        the changelog is a sink's (its ``<changelog>-progress`` topic exists with one
        partition), else None (Kafka Streams' changelogs have none). Made on the first call
        and closed with the source.

        Raises
        ------
        PositionUnavailableError
            The progress topic cannot be described (not authorized, say): whether it exists
            is unknown.
        """
        if self._batches is None:
            from spark_statestore.connectors.kafka.follower.batches import KafkaBatchProgress
            from spark_statestore.connectors.kafka.sink.progress import PROGRESS_SUFFIX

            progress_topic = self._topic + PROGRESS_SUFFIX
            try:
                with self._offsets_lock:
                    count = clients.partition_count(
                        self._offsets_client, progress_topic, self._timeout_s
                    )
            except KafkaClientError as exc:
                raise PositionUnavailableError(
                    f"cannot tell whether changelog {self._topic!r} is a sink's ({exc}): its "
                    f"store grants no position until it can, so reads bounded by a position "
                    f"wait; let this client describe {progress_topic!r}"
                ) from exc
            self._batches = (
                KafkaBatchProgress(
                    self._bootstrap, self._topic, config=self._user, timeout_s=self._timeout_s
                )
                if count == 1
                else False
            )
        return self._batches or None

    def versioned_store_retention_ms(self) -> int | None:
        """The changelog's ``min.compaction.lag.ms`` when it is one day or more, which is how
        Kafka Streams marks a versioned store's changelog (history retention plus a day);
        None otherwise. Other changelogs leave it at Kafka's default, 0."""
        settings = clients.topic_config(self._bootstrap, self._user, self._topic, self._timeout_s)
        lag = settings.get("min.compaction.lag.ms", "0")
        try:
            lag_ms = int(lag)
        except ValueError:
            return None
        return lag_ms if lag_ms >= _VERSIONED_LAG_MS else None

    def end_offsets(self, partitions: Sequence[int]) -> dict[int, int]:
        return {p: high for p, (_, high) in self.watermarks(partitions).items()}

    def watermarks(self, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        """``{partition: (earliest offset, end offset)}``."""
        with self._offsets_lock:
            return {
                p: clients.watermarks(self._offsets_client, self._topic, p, self._timeout_s)
                for p in partitions
            }

    def assign(self, starts: Mapping[int, int]) -> None:
        self._assigned = sorted(starts)
        self._positions = dict(starts)
        if self._consumer is None and self._native is None:
            self._open_reader(len(starts))
        if self._native is not None:
            self._native.assign(starts)
            return
        assert self._consumer is not None
        self._consumer.assign([TopicPartition(self._topic, p, o) for p, o in starts.items()])

    @property
    def columnar(self) -> bool:
        """True when records are read into columns by the compiled extension."""
        return self._native is not None

    def _open_reader(self, partitions: int) -> None:
        """The consumer that reads the records, its read-ahead bounded in total: the column
        reader on the fast path, else a confluent-kafka consumer."""
        settings = read_ahead_settings({**_READER_DEFAULTS, **self._user}, self._user, partitions)
        if self._extension is not None:
            full = clients.consumer_settings(
                self._bootstrap,
                settings,
                group=self._group,
                what=f"changelog {self._topic!r}",
                defaults=_READER_DEFAULTS,
            )
            plain = native_settings(full)
            if plain is not None:
                self._native = NativeReader(self._extension, plain, self._topic, self._on_missing)
                return
            _log.info(
                "changelog %r: a kafka.* setting is a Python callback, which only "
                "confluent-kafka's consumer takes: reading on the reference path",
                self._topic,
            )
        self._consumer = self._client(self._group, settings)

    def _client(self, group: str, config: Mapping[str, Any], *, quiet: bool = False) -> Consumer:
        return clients.consumer(
            self._bootstrap,
            config,
            group=group,
            what=f"changelog {self._topic!r}",
            defaults=_READER_DEFAULTS,
            quiet=quiet,
        )

    def _reader(self) -> Consumer:
        if self._consumer is None:
            raise KafkaClientError(f"changelog {self._topic!r} is read before assign()")
        return self._consumer

    def poll(self, max_records: int, timeout_s: float, *, fill: bool = True) -> PollResult:
        if self._native is not None:
            return self._poll_columns(self._native, max_records, timeout_s, fill)
        consumer = self._reader()
        limit = min(max_records, 1_000_000)
        if fill:
            messages = consumer.consume(limit, timeout=timeout_s)
        else:
            # consume() waits for all ``limit`` records or the timeout; a caught-up reader
            # wants the first arrival at once, plus whatever came with it.
            first = consumer.poll(timeout_s)
            messages = [] if first is None else [first]
            if first is not None and limit > 1:
                messages += consumer.consume(limit - 1, timeout=0)
        rows: list[Row] = []
        append = rows.append
        merger = PositionMerger(self._on_missing)
        all_headers: list[Any] = []
        add_headers = all_headers.append
        topic = self._topic
        resets: dict[int, int] = {}
        for message in messages:
            error = message.error()
            if error is None:
                key = message.key()
                if key is None:
                    message_to_record(message, self._on_missing)  # raises, naming the record
                    continue
                # A consumed record always has a partition and an offset (the stubs allow
                # None); headers come as a list of (str, bytes) pairs. No cast() per record.
                partition: int = message.partition()  # type: ignore[assignment]
                offset: int = message.offset()  # type: ignore[assignment]
                kind, timestamp = message.timestamp()
                add_headers(message.headers())
                append(
                    (
                        key,
                        message.value(),
                        partition,
                        offset,
                        timestamp if kind else -1,
                    )
                )
                continue
            where, at = message.partition(), message.offset()
            if self._handled(error.code(), where, at, resets):
                continue
            raise KafkaClientError(
                f"reading changelog {self._topic}-{message.partition()} at offset "
                f"{message.offset()} failed: {error.str()}"
            )
        # The consumer's position is past every record it returned (and past markers it
        # skipped), so it covers the records above without a per-record loop.
        if self._assigned:
            tps = [TopicPartition(self._topic, p) for p in self._assigned]
            for tp in consumer.position(tps):
                if tp.offset != _INVALID_OFFSET and tp.offset > self._positions.get(
                    tp.partition, 0
                ):
                    self._positions[tp.partition] = tp.offset
        if resets:
            # A partition whose offset was reset is in an error state that seek() refuses:
            # assign everything again, at the positions of the records returned so far.
            self._positions.update(resets)
            consumer.assign(
                [TopicPartition(self._topic, p, self._positions[p]) for p in self._assigned]
            )
        merger.add_all(all_headers, topic, rows)
        return PollResult(
            rows,
            dict(self._positions),
            merger.position(),
            merger.without,
            merger.skipped,
            kept_headers(all_headers),
        )

    def _handled(
        self, code: int, where: int | None, at: int | None, resets: dict[int, int]
    ) -> bool:
        """Apply a consumer event (a partition's end, an offset gone); False: an error."""
        if code == KafkaError._PARTITION_EOF:
            if where is not None and at is not None:
                # Past the transaction markers at the end of the partition.
                self._positions[where] = max(self._positions.get(where, 0), at)
            return True
        if code == KafkaError._AUTO_OFFSET_RESET and where is not None:
            wanted = self._positions.get(where, 0)
            low = handle_out_of_range(
                self._topic,
                where,
                wanted,
                self.watermarks([where])[where],
                fail_on_data_loss=self._fail_on_data_loss,
            )
            self.lost_offsets[where] = self.lost_offsets.get(where, 0) + low - wanted
            resets[where] = low
            return True
        return False

    def _poll_columns(
        self, reader: NativeReader, max_records: int, timeout_s: float, fill: bool
    ) -> PollResult:
        """:meth:`poll` on the fast path: the same events, positions and errors."""
        polled = reader.poll(min(max_records, 1_000_000), timeout_s, fill)
        resets: dict[int, int] = {}
        for code, _name, where, at, text in polled.events:
            if self._handled(code, where if where >= 0 else None, at if at >= 0 else None, resets):
                continue
            raise KafkaClientError(
                f"reading changelog {self._topic}-{where} at offset {at} failed: {text}"
            )
        # The consumer's position is past every record it returned (and past markers it
        # skipped), so it covers the records above without a per-record loop.
        for partition, offset in polled.next_offsets.items():
            if offset > self._positions.get(partition, 0):
                self._positions[partition] = offset
        if resets:
            self._positions.update(resets)
            reader.assign({p: self._positions[p] for p in self._assigned})
        return PollResult(
            polled.records,
            dict(self._positions),
            polled.position,
            polled.without_position,
            polled.skipped_positions,
            polled.headers,
        )

    def close(self) -> None:
        if self._native is not None:
            self._native.close()
        if self._consumer is not None:
            self._consumer.close()
        if self._batches:
            self._batches.close()
        self._offsets_client.close()


def kept_headers(
    all_headers: Sequence[Sequence[tuple[str, bytes | None]] | None],
) -> dict[int, tuple[tuple[str, bytes | None], ...]]:
    """``{row index: headers}`` of the records with headers besides ``v``/``c`` (Kafka
    Streams 4.3 header-aware stores log a record's headers on its changelog record; the
    position headers are the changelog's own, not the record's)."""
    kept = {}
    for index, headers in enumerate(all_headers):
        if not headers or (
            len(headers) == 2
            and headers[0][0] == VERSION_HEADER
            and headers[1][0] == POSITION_HEADER
        ):
            continue  # the common cases: none, or just Kafka Streams' position headers
        others = tuple(h for h in headers if h[0] not in _POSITION_HEADERS)
        if others:
            kept[index] = others
    return kept


def read_ahead_settings(
    settings: Mapping[str, Any], user: Mapping[str, Any], partitions: int
) -> dict[str, Any]:
    """``settings`` with librdkafka's per-partition read-ahead set so that ``partitions``
    partitions together buffer at most :data:`READ_AHEAD_BYTES` fetched bytes (256 KiB
    each at least) and :data:`READ_AHEAD_RECORDS` records (1,000 each at least), unless the
    user's own ``queued.max.messages.kbytes`` / ``queued.min.messages`` say otherwise.
    librdkafka stops fetching a partition once either of its limits is reached; each may be
    overshot by one fetch."""
    out = dict(settings)
    share = max(1, partitions)
    if "queued.min.messages" not in user:
        out["queued.min.messages"] = max(_MIN_PARTITION_RECORDS, READ_AHEAD_RECORDS // share)
    if "queued.max.messages.kbytes" in user:
        return out
    kib = max(_MIN_PARTITION_KIB, READ_AHEAD_BYTES // 1024 // share)
    out["queued.max.messages.kbytes"] = kib
    # A fetch never asks for more than the budget leaves room for (Kafka still returns a
    # larger first batch whole). librdkafka refuses a fetch.max.bytes below
    # message.max.bytes, a consumer's limit on the requests it sends (1,000,000 by default).
    out["fetch.max.bytes"] = min(int(out.get("fetch.max.bytes", kib * 1024)), kib * 1024)
    if "message.max.bytes" not in user:
        out["message.max.bytes"] = min(
            int(out.get("message.max.bytes", 1_000_000)), out["fetch.max.bytes"]
        )
    return out


def changelog_lags(
    bootstrap_servers: str,
    topic: str,
    partitions: Sequence[int],
    offsets: Mapping[int, int],
    *,
    config: Mapping[str, Any] | None = None,
) -> dict[int, LagInfo]:
    """``{partition: LagInfo}`` of a store that is not being followed: its applied changelog
    ``offsets`` (``{partition: next offset}``) against the changelog's end offsets now (last
    stable offsets, read_committed), for ``partitions``.

    Raises
    ------
    KafkaClientError
        If the changelog's offsets cannot be read (no broker, no such topic).
    """
    source = KafkaChangelogSource(bootstrap_servers, topic, config=config)
    try:
        ends = source.end_offsets(list(partitions))
    finally:
        source.close()
    return {p: LagInfo(offsets.get(p, 0), max(end, offsets.get(p, 0))) for p, end in ends.items()}
