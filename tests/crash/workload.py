"""A deterministic sequence of store transactions, shared by the crash child and its checker.

Transaction ``i`` is a pure function of ``(seed, i)``: small ones (a few puts and deletes) and,
every ``LARGE_EVERY`` transactions, one large enough to spill past the child's tiny
``uncommitted_max_bytes`` and be committed in many chunks under a redo marker.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KEYS = 400
PARTITIONS = 3
LARGE_EVERY = 5
BUDGET_BYTES = 24 * 1024  # the child's uncommitted_max_bytes: large transactions spill
CHUNK_BYTES = 6 * 1024  # the child's chunk size: a large commit takes ~15 chunks
INPUT_TOPIC = "input"
QUERY_ID = "crash-test"


@dataclass(frozen=True)
class Txn:
    index: int
    ops: tuple[tuple[bytes, bytes | None, int, int], ...]  # key, value|None, partition, offset
    source: tuple[str, int, int]  # input topic, partition, offset (merged into the position)
    changelog: tuple[int, int]  # changelog partition, next offset

    @property
    def large(self) -> bool:
        return self.index % LARGE_EVERY == LARGE_EVERY - 1


def transaction(seed: int, index: int) -> Txn:
    rng = random.Random(seed * 1_000_003 + index)
    large = index % LARGE_EVERY == LARGE_EVERY - 1
    count = rng.randint(150, 250) if large else rng.randint(1, 12)
    ops = []
    for n in range(count):
        key = b"key-%04d" % rng.randrange(KEYS)
        offset = index * 1000 + n
        partition = rng.randrange(PARTITIONS)
        if rng.random() < 0.2:
            ops.append((key, None, partition, offset))
        else:
            size = rng.randint(100, 400) if large else rng.randint(1, 40)
            ops.append((key, rng.randbytes(size), partition, offset))
    return Txn(
        index,
        tuple(ops),
        (INPUT_TOPIC, index % 4, index),
        (index % PARTITIONS, index * 1000 + count),
    )


class Model:
    """The fold of a committed prefix of the sequence, extended incrementally."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.committed = -1
        self.data: dict[bytes, tuple[bytes, int, int]] = {}
        self.position: dict[str, dict[int, int]] = {}
        self.offsets: dict[int, int] = {}

    def advance_to(self, last: int) -> None:
        if last < self.committed:
            raise AssertionError(f"commits went backwards: {self.committed} -> {last}")
        for index in range(self.committed + 1, last + 1):
            txn = transaction(self.seed, index)
            for key, value, partition, offset in txn.ops:
                if value is None:
                    self.data.pop(key, None)
                else:
                    self.data[key] = (value, partition, offset)
            topic, partition, offset = txn.source
            slot = self.position.setdefault(topic, {})
            slot[partition] = max(slot.get(partition, -1), offset)
            self.offsets[txn.changelog[0]] = txn.changelog[1]
        self.committed = last
