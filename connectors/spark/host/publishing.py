"""The commit's side of the store host's changelog publishing
(:mod:`~spark_statestore.connectors.kafka.sink.streamed` is the host's).

:class:`HostPublisher` is the :class:`~spark_statestore.sink.commit.ChangelogPublisher` a
sink commit uses when its Spark driver has a store host: the host holds the store's
changelog producer (so that it can publish a batch while the tasks stage it), and the commit
asks it for the last published batch, to publish (commit) the batch, and which batch comes
next. Only processes that can read the host's owner-only record (the driver's own) know the
commit token these calls carry; the tasks' token does not let anyone publish.

Errors the host meets publishing come back as the same exception classes, with their
messages (a transaction timeout, a fenced producer, a missing topic...).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.kafka.errors import (
    KafkaClientError,
    ProducerFencedError,
    TransactionTimeoutError,
)
from spark_statestore.connectors.kafka.sink.streamed import ChangelogTarget
from spark_statestore.position import Position

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.connectors.kafka.sink.publisher import KafkaChangelogPublisher
    from spark_statestore.connectors.spark.host.record import HostRef
    from spark_statestore.sink.changes import (
        ChangelogRow,
        PublishedBatch,
        StagedBatch,
        StagedPublication,
    )
    from spark_statestore.sink.staging import StagingArea
    from spark_statestore.sink.stats import SinkStats

__all__ = [
    "ABORT",
    "EXPECT",
    "PARTITIONS",
    "PUBLISHED",
    "PUBLISH_STAGED",
    "HostPublisher",
    "abort_streamed",
    "coordinates_schema",
    "error_from_json",
    "error_to_json",
]

EXPECT, PUBLISHED, ABORT = "changelog-expect", "changelog-published", "changelog-abort"
PARTITIONS = "changelog-partitions"
"""The host's Flight actions for a commit (JSON bodies with the commit token)."""
PUBLISH_STAGED = "publish_staged"
"""The ``kind`` of the host's ``DoExchange`` that publishes (commits) a batch."""
CALL_TIMEOUT_S = 3600.0
"""A publish call may take as long as a Kafka transaction may stay open (and then some)."""


def coordinates_schema() -> pa.Schema:
    """One reply batch per staged file: each row's changelog partition and offset."""
    import pyarrow as pa

    return pa.schema([pa.field("partition", pa.int32()), pa.field("offset", pa.int64())])


def error_to_json(exc: BaseException) -> dict[str, Any]:
    """An error the host met publishing, as JSON for the commit to raise again."""
    from spark_statestore.sink.errors import StagingError

    data: dict[str, Any] = {"class": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, TransactionTimeoutError):
        data.update(
            kind="timeout",
            batch_id=exc.batch_id,
            changes=exc.changes,
            elapsed_s=exc.elapsed_s,
            timeout_ms=exc.timeout_ms,
            code=exc.code,
        )
    elif isinstance(exc, ProducerFencedError):
        data.update(kind="fenced", transactional_id=exc.transactional_id, code=exc.code)
    elif isinstance(exc, KafkaClientError):
        data.update(kind="kafka", code=exc.code)
    elif isinstance(exc, StagingError):
        data.update(kind="staging")
    else:
        data.update(kind="other")
    return data


def error_from_json(data: Any, location: str) -> Exception:
    """The exception :func:`error_to_json` described."""
    from spark_statestore.sink.errors import StagingError

    if not isinstance(data, dict):
        return KafkaClientError(f"the store host {location} failed to publish: {data!r}")
    message, kind = str(data.get("message")), data.get("kind")
    if kind == "timeout":
        return TransactionTimeoutError(
            message,
            batch_id=int(data["batch_id"]),
            changes=int(data["changes"]),
            elapsed_s=float(data["elapsed_s"]),
            timeout_ms=int(data["timeout_ms"]),
            code=data.get("code"),
        )
    if kind == "fenced":
        return ProducerFencedError(message, str(data["transactional_id"]), data.get("code"))
    if kind == "kafka":
        return KafkaClientError(message, data.get("code"))
    if kind == "staging":
        return StagingError(message)
    return KafkaClientError(
        f"the store host {location} failed to publish ({data.get('class')}: {message})"
    )


class HostPublisher:
    """A store's changelog, published through its driver's store host.

    Parameters
    ----------
    ref, commit_token
        The host, and the token its commit calls carry (from its owner-only record).
    store_path
        The store (absolute).
    bootstrap_servers, topic, application_id, config
        The changelog, as the sink's options name it.
    stats
        Where each batch the host publishes is counted (the sink's store server's).
    """

    def __init__(
        self,
        ref: HostRef,
        commit_token: str,
        store_path: str,
        bootstrap_servers: str,
        topic: str,
        *,
        application_id: str,
        config: Mapping[str, Any] | None = None,
        stats: SinkStats | None = None,
    ) -> None:
        from spark_statestore.connectors.kafka.sink.publisher import KafkaChangelogPublisher
        from spark_statestore.connectors.spark.host.client import shared_client

        self._ref = ref
        self._commit_token = commit_token
        self._store = store_path
        self._bootstrap = bootstrap_servers
        self._topic = topic
        self._application_id = application_id
        self._config = dict(config or {})
        self._stats = stats
        # Reads (the roll-forward) need no producer: this process does them.
        self._local: KafkaChangelogPublisher = KafkaChangelogPublisher(
            bootstrap_servers, topic, application_id=application_id, config=self._config
        )
        # One connection per process and host: a commit process serves every micro-batch of
        # its query, and a new (TLS) connection per commit cost more than the calls on it.
        self._client = shared_client(ref)
        self._partitions: int | None = None

    @property
    def topic(self) -> str:
        return self._topic

    def partition_count(self) -> int:
        """The changelog's partition count, as the host's producer knows it (no client of
        this process's own: a fresh one per commit cost a metadata round trip)."""
        if self._partitions is None:
            target = ChangelogTarget.of(
                self._bootstrap, self._topic, self._application_id, self._config, "-"
            )
            body = {"commit_token": self._commit_token, "changelog": target.to_json()}
            reply = self._action(PARTITIONS, body)
            count = reply.get("partitions")
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise KafkaClientError(
                    f"the store host {self._ref.location} answered {count!r} partitions for "
                    f"changelog {self._topic!r}"
                )
            self._partitions = count
        return self._partitions

    def _request(self, store_id: str, **more: Any) -> dict[str, Any]:
        target = ChangelogTarget.of(
            self._bootstrap, self._topic, self._application_id, self._config, store_id
        )
        return {
            "commit_token": self._commit_token,
            "store": self._store,
            "target": target.to_json(),
            **more,
        }

    def published_batch(self, store_id: str) -> PublishedBatch | None:
        from spark_statestore.sink.changes import PublishedBatch

        reply = self._action(PUBLISHED, self._request(store_id))
        published = reply.get("published")
        if published is None:
            return None
        return PublishedBatch(
            str(published["query_id"]),
            int(published["batch_id"]),
            {int(p): int(o) for p, o in published["end_offsets"].items()},
        )

    def expect_batch(
        self, store_id: str, query_id: str, batch_id: int, position: Position, budget_bytes: int
    ) -> None:
        """Ask the host to publish batch ``batch_id`` while its tasks stage it."""
        self._action(
            EXPECT,
            self._request(
                store_id,
                query_id=query_id,
                batch_id=batch_id,
                position=position.to_dict(),
                budget_bytes=budget_bytes,
            ),
        )

    def publish(self, changes: Any, **_: Any) -> dict[int, int]:
        raise KafkaClientError(
            "the store host publishes a batch from its staged files (publish_staged)"
        )

    def publish_staged(self, staging: StagingArea, batch: StagedBatch) -> StagedPublication:
        """Have the host commit the batch: the transaction it streamed, or a new one."""
        import pyarrow as pa
        import pyarrow.flight as flight

        from spark_statestore.sink.changes import StagedPublication
        from spark_statestore.sink.stats import PublishReport

        request = self._request(
            batch.store_id,
            kind=PUBLISH_STAGED,
            query_id=batch.query_id,
            batch_id=batch.batch_id,
            source_offsets=batch.source_offsets,
            header=None if batch.header is None else batch.header.to_dict(),
            files=[staged.to_json() for staged in batch.files],
        )
        descriptor = flight.FlightDescriptor.for_command(json.dumps(request).encode())
        absent = pa.schema([pa.field("key", pa.binary(), nullable=False)])
        try:
            writer, reader = self._client.exchange(descriptor, CALL_TIMEOUT_S)
            writer.begin(absent)
            if batch.absent:
                writer.write_batch(
                    pa.record_batch([pa.array(list(batch.absent), pa.binary())], schema=absent)
                )
            writer.done_writing()
            chunks = list(_chunks(reader))
            writer.close()
        except pa.ArrowException as exc:
            raise self._client.error(exc) from exc
        meta = _reply_metadata(chunks, self._ref.location)
        if "error" in meta:
            raise error_from_json(meta["error"], self._ref.location)
        batches = [data for data, _ in chunks if data is not None]
        if len(batches) != len(batch.files) + 1:
            raise KafkaClientError(
                f"the store host {self._ref.location} answered {len(batches)} coordinate "
                f"batches for {len(batch.files)} staged files"
            )
        if self._stats is not None and meta.get("report") is not None:
            produced, produce_s, commit_s = meta["report"]
            self._stats.published(PublishReport(int(produced), float(produce_s), float(commit_s)))
        absent_part = batches[0]
        return StagedPublication(
            {int(p): int(o) for p, o in meta["ends"].items()},
            int(meta["stamp_ms"]),
            (absent_part.column(0).to_pylist(), absent_part.column(1).to_pylist()),
            [(b.column(0), b.column(1)) for b in batches[1:]],
        )

    def read(self, starts: Mapping[int, int], ends: Mapping[int, int]) -> Iterator[ChangelogRow]:
        return self._local.read(starts, ends)

    def close(self) -> None:
        """Close this process's Kafka clients (the host connection stays, shared)."""
        self._local.close()

    def _action(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        reply = self._client.action(name, body, CALL_TIMEOUT_S)
        if "error" in reply:
            raise error_from_json(reply["error"], self._ref.location)
        return reply

    def __enter__(self) -> HostPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def abort_streamed(
    ref: HostRef, commit_token: str, store_path: str, query_id: str, batch_id: int
) -> None:
    """Spark aborted the batch: the host aborts what it published of it (if anything)."""
    from spark_statestore.connectors.spark.host.client import StoreHostClient

    body = {
        "commit_token": commit_token,
        "store": store_path,
        "query_id": query_id,
        "batch_id": batch_id,
    }
    with StoreHostClient(ref) as client:
        client.action(ABORT, body, 60.0)


def _chunks(reader: Any) -> Iterator[tuple[Any, Any]]:
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            return
        yield chunk.data, chunk.app_metadata


def _reply_metadata(chunks: list[tuple[Any, Any]], location: str) -> dict[str, Any]:
    """The reply's JSON metadata (its last metadata message)."""
    raw = [meta for _, meta in chunks if meta is not None]
    if not raw:
        raise KafkaClientError(f"the store host {location} did not say what it published")
    data = json.loads(raw[-1].to_pybytes())
    if not isinstance(data, dict):
        raise KafkaClientError(f"the store host {location} answered {data!r}")
    return data
