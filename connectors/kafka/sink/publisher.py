"""The sink's changelog publisher: a :class:`~spark_statestore.sink.commit.ChangelogPublisher`
on Kafka.

Wraps :class:`~spark_statestore.connectors.kafka.sink.writer.ChangelogWriter`. Its
transactional id is derived from the application id and the store id, so a restarted or
zombie sink of the same store is fenced; the writer is initialized (fencing any zombie and
aborting its open transaction) before the last published batch is read, so what the commit
protocol learns from the progress topic cannot change under it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from spark_statestore.changelog.headers import position_from_headers
from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import KafkaClientError
from spark_statestore.connectors.kafka.sink.progress import ProgressRecord, read_last_progress
from spark_statestore.connectors.kafka.sink.ranges import read_changelog_range
from spark_statestore.connectors.kafka.sink.writer import ChangelogWriter, transactional_id_for
from spark_statestore.position import Position
from spark_statestore.sink.changes import Change, ChangeChunk, ChangelogRow, PublishedBatch
from spark_statestore.sink.stats import SinkStats

__all__ = ["KafkaChangelogPublisher"]


class KafkaChangelogPublisher:
    """Publishes a sink's batches to ``topic`` in Kafka transactions.

    Parameters
    ----------
    bootstrap_servers
        The Kafka cluster.
    topic
        The changelog topic (it and ``<topic>-progress`` must exist).
    application_id
        The sink's owner id (the transactional id's prefix).
    config
        Producer/consumer settings (the sink's ``kafka.*`` options without the prefix).
    stats
        Where each published batch is counted (a long-lived committer's, for its metrics).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        application_id: str,
        config: Mapping[str, Any] | None = None,
        timeout_s: float = 30.0,
        stats: SinkStats | None = None,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._topic = topic
        self._application_id = application_id
        self._config = dict(config or {})
        self._timeout_s = timeout_s
        self._stats = stats
        self._partitions: int | None = None
        self._writer: ChangelogWriter | None = None
        self._store_id: str | None = None
        # The batch this publisher itself committed last: the progress topic's last record
        # as long as the writer is not fenced (only this transactional id writes it).
        self._published: PublishedBatch | None = None

    @property
    def topic(self) -> str:
        return self._topic

    def partition_count(self) -> int:
        if self._partitions is None:
            client = clients.producer(
                self._bootstrap, self._config, what=f"changelog {self._topic!r}"
            )
            count = clients.partition_count(client, self._topic, self._timeout_s)
            if count is None:
                raise KafkaClientError(
                    f"changelog topic {self._topic!r} does not exist: the sink never creates "
                    f"it; create it (and {self._topic}-progress with 1 partition) first"
                )
            self._partitions = count
        return self._partitions

    def _writer_for(self, store_id: str) -> ChangelogWriter:
        if self._writer is None:
            self._writer = ChangelogWriter(
                self._bootstrap,
                self._topic,
                transactional_id=transactional_id_for(store_id, self._application_id),
                config=self._config,
                timeout_s=self._timeout_s,
                stats=self._stats,
            )
            self._writer.init()  # fences a zombie of this store before anything is read
            self._store_id = store_id
        elif store_id != self._store_id:
            raise KafkaClientError(f"this publisher serves store {self._store_id}, not {store_id}")
        return self._writer

    def published_batch(self, store_id: str) -> PublishedBatch | None:
        """The last batch in the progress topic. After a batch this publisher committed
        itself, that batch without reading the topic: its writer holds the transactional
        id, so no other writer added a batch without fencing it, and a fenced writer fails
        its next publish (the duplicate sink must stop either way)."""
        self._writer_for(store_id)
        if self._published is not None:
            return self._published
        record = read_last_progress(
            self._bootstrap, self._topic, store_id, config=self._config, timeout_s=self._timeout_s
        )
        if record is None:
            return None
        return PublishedBatch(record.query_id, record.batch_id, dict(record.changelog_end_offsets))

    def publish(
        self,
        changes: Iterable[Change],
        *,
        store_id: str,
        query_id: str,
        batch_id: int,
        source_offsets: Any,
        position: Position | None = None,
    ) -> dict[int, int]:
        progress = ProgressRecord.for_batch(
            store_id, query_id, batch_id, source_offsets, position=position
        )
        writer = self._writer_for(store_id)
        self._published = None  # unknown until this transaction commits
        ends = writer.publish(changes, progress=progress)
        self._published = PublishedBatch(query_id, batch_id, dict(ends))
        return ends

    # -- one batch in steps: the store host publishes a batch while its tasks stage it -----
    def begin(self, store_id: str, batch_id: int) -> None:
        """Begin batch ``batch_id``'s transaction (see :meth:`ChangelogWriter.begin`)."""
        self._writer_for(store_id).begin(batch_id)

    def produce_chunk(self, store_id: str, chunk: ChangeChunk) -> None:
        """Produce ``chunk`` into the open transaction (see
        :meth:`ChangelogWriter.produce_chunk`)."""
        self._writer_for(store_id).produce_chunk(chunk)

    def transaction_timeout_ms(self) -> int:
        """The producer's ``transaction.timeout.ms`` (once its writer exists)."""
        if self._writer is None:
            raise KafkaClientError(f"changelog {self._topic!r}: no producer yet")
        return self._writer.transaction_timeout_ms

    def transaction_age_s(self) -> float | None:
        """Seconds the open transaction has been open, or None."""
        return None if self._writer is None else self._writer.transaction_age_s

    def commit(
        self,
        *,
        store_id: str,
        query_id: str,
        batch_id: int,
        source_offsets: Any,
        position: Position | None = None,
    ) -> dict[int, int]:
        """Commit the open transaction with the batch's progress record; its end offsets
        (see :meth:`ChangelogWriter.commit`)."""
        progress = ProgressRecord.for_batch(
            store_id, query_id, batch_id, source_offsets, position=position
        )
        writer = self._writer_for(store_id)
        self._published = None  # unknown until this transaction commits
        ends = writer.commit(progress)
        self._published = PublishedBatch(query_id, batch_id, dict(ends))
        return ends

    def abort(self, cause: BaseException) -> None:
        """Abort the open transaction, if any (nothing of it becomes visible)."""
        if self._writer is not None:
            self._writer.abort_batch(cause)

    @property
    def healthy(self) -> bool:
        """False once its writer is fenced or failed: make a new publisher."""
        return self._writer is None or self._writer.ready

    def read(self, starts: Mapping[int, int], ends: Mapping[int, int]) -> Iterator[ChangelogRow]:
        for entry in read_changelog_range(
            self._bootstrap, self._topic, starts, ends, config=self._config
        ):
            if entry.key is None:  # a changelog key is never null: nothing can apply it
                raise KafkaClientError(
                    f"changelog {self._topic}-{entry.partition} offset {entry.offset} has a "
                    "null key; it was not written by this sink"
                )
            position = position_from_headers(
                entry.headers, topic=self._topic, partition=entry.partition, offset=entry.offset
            )
            stamp = entry.timestamp if entry.timestamp is not None and entry.timestamp >= 0 else -1
            yield entry.partition, entry.offset, entry.key, entry.value, position, stamp

    def close(self) -> None:
        self._published = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> KafkaChangelogPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
