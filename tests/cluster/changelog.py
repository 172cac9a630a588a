"""Ground truth for the cluster tests: a changelog written the way a Kafka Streams app writes
one (keys placed by Kafka's Java partitioner, position headers naming the input offset), and
what was acknowledged, folded and reached."""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer

from spark_statestore.changelog import partition_for_key
from spark_statestore.changelog.position_codec import encode_position
from spark_statestore.position import Position

INPUT = "orders"
"""The input topic the changelog's position headers name (input partition n feeds store
partition n, as in Kafka Streams)."""


def java_partitioned_producer(bootstrap: str) -> Producer:
    """An idempotent producer that places keys as Kafka's Java clients do
    (``partitioner=murmur2_random``), as a Kafka Streams app's writes are placed."""
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
        }
    )


@dataclass(frozen=True)
class Produced:
    """One acknowledged changelog record."""

    key: bytes
    value: bytes | None
    partition: int
    offset: int
    input_offset: int

    @property
    def op(self) -> str:
        return "delete" if self.value is None else "upsert"


@dataclass
class ChangelogLog:
    """Writes ``topic`` with a plain idempotent producer (``partitioner=murmur2_random``,
    as Kafka's Java clients place keys) and keeps what Kafka acknowledged."""

    bootstrap: str
    topic: str
    partitions: int
    records: list[Produced] = field(default_factory=list)
    _producer: Any = field(default=None, repr=False)
    _input_offset: int = -1

    def produce(self, changes: list[tuple[bytes, bytes | None]]) -> list[Produced]:
        """Write ``changes`` in order; returns their acknowledged records."""
        if self._producer is None:
            self._producer = java_partitioned_producer(self.bootstrap)
        acked: list[Produced] = []
        failures: list[Any] = []

        def delivered(input_offset: int, error: Any, message: Any) -> None:
            if error is not None:
                failures.append(error)
                return
            acked.append(
                Produced(
                    message.key(),
                    message.value(),
                    message.partition(),
                    message.offset(),
                    input_offset,
                )
            )

        for key, value in changes:
            self._input_offset += 1
            partition = partition_for_key(key, self.partitions)  # where the producer puts it
            header = encode_position(
                Position.from_map({INPUT: {partition: self._input_offset}}),
                pad_like_kafka_streams=True,
            )
            self._producer.produce(
                self.topic,
                key=key,
                value=value,
                headers=[("v", b"\x00"), ("c", header)],
                on_delivery=functools.partial(delivered, self._input_offset),
            )
        assert self._producer.flush(30) == 0 and not failures, failures
        misplaced = [r for r in acked if r.partition != partition_for_key(r.key, self.partitions)]
        assert not misplaced, f"murmur2_random placed keys elsewhere than Java would: {misplaced}"
        acked.sort(key=lambda r: r.input_offset)
        self.records.extend(acked)
        return acked

    @property
    def model(self) -> dict[bytes, bytes]:
        """The store every record folded in order (a null value deletes)."""
        return fold((r.key, r.value) for r in self.records)

    @property
    def position(self) -> dict[str, dict[int, int]]:
        """The input position the records' headers reach."""
        reached: dict[int, int] = {}
        for record in self.records:
            reached[record.partition] = max(reached.get(record.partition, -1), record.input_offset)
        return {INPUT: reached} if reached else {}

    @property
    def ends(self) -> dict[int, int]:
        """Each partition's end offset (the next offset Kafka will give)."""
        ends = dict.fromkeys(range(self.partitions), 0)
        for record in self.records:
            ends[record.partition] = max(ends[record.partition], record.offset + 1)
        return ends


def fold(changes: Iterable[tuple[bytes, bytes | None]]) -> dict[bytes, bytes]:
    """The store ``changes`` make, in order (a null value deletes the key)."""
    folded: dict[bytes, bytes] = {}
    for key, value in changes:
        if value is None:
            folded.pop(key, None)
        else:
            folded[key] = value
    return folded


def random_changes(seed: int, count: int, keys: int = 30) -> list[tuple[bytes, bytes | None]]:
    """``count`` upserts and deletes (one in five) of ``keys`` keys."""
    rng = random.Random(seed)
    return [
        (b"k%03d" % rng.randrange(keys), None if rng.random() < 0.2 else b"v%d" % rng.randrange(99))
        for _ in range(count)
    ]
