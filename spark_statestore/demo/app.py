"""The demo's "other application": a Kafka Streams-like inventory app and its changelog.

The app ``inventory-app`` keeps a key-value store ``stock`` (item -> units in stock) and
logs every change to ``inventory-app-stock-changelog`` the way Kafka Streams does with
exactly-once processing: one Kafka transaction per commit, keys as UTF-8 strings, values as
8-byte big-endian longs (Kafka's ``LongSerializer``), ``null`` for a deleted item, and the
``v``/``c`` position headers (the input offsets of ``inventory-orders`` the task had processed
when it logged the change, padded the way Kafka Streams pads them).

What it writes is a fixed script (:func:`inventory_script`), so the demo knows what to
expect; :func:`expected_state` folds it. Run it as its own process::

    python -m spark_statestore.demo.app --bootstrap-servers HOST:PORT

and send it a phase number per line on stdin; it writes that phase's transactions, prints a
line per transaction and then ``done <phase> <written>``, where ``<written>`` is the position
(offsets JSON) of the changelog records it committed in that phase: per changelog partition,
the offset of the last one (so a reader can bound a query by a write it has just seen). It
exits at the end of its input.

Kafka clients are imported inside :class:`InventoryApp`, never at module import.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_statestore.changelog import encode_position, partition_for_key
from spark_statestore.position import Position

if TYPE_CHECKING:
    from confluent_kafka import Producer

__all__ = [
    "ABORTED_STOCK",
    "APP_ID",
    "CHANGELOG",
    "INPUT_TOPIC",
    "PARTITIONS",
    "SOLD",
    "SOLD_ITEM",
    "AppState",
    "InventoryApp",
    "Transaction",
    "decode_stock",
    "encode_stock",
    "expected_state",
    "inventory_script",
    "main",
]

APP_ID = "inventory-app"
STORE = "stock"
CHANGELOG = f"{APP_ID}-{STORE}-changelog"
INPUT_TOPIC = "inventory-orders"
PARTITIONS = 4
ABORTED_STOCK = 999_999
"""The stock the aborted transaction writes: it must never be seen by a read_committed reader."""
SOLD_ITEM = "item-042"
SOLD = 12
"""Units of :data:`SOLD_ITEM` phase 3 sells."""

_ITEMS = 50
_LONG = struct.Struct(">q")


def item(number: int) -> str:
    """The key of item ``number``: ``item-042``."""
    return f"item-{number:03d}"


def encode_stock(units: int) -> bytes:
    """Units in stock as Kafka's ``LongSerializer`` writes them (8 bytes, big-endian)."""
    return _LONG.pack(units)


def decode_stock(value: bytes) -> int:
    """The inverse of :func:`encode_stock`."""
    return int(_LONG.unpack(value)[0])


@dataclass(frozen=True)
class Transaction:
    """One commit of the app: ``(key, units or None for a delete)`` changes, in order."""

    phase: int
    label: str
    changes: tuple[tuple[str, int | None], ...]
    aborted: bool = False

    def describe(self) -> str:
        """``label (2 upserts, 1 delete)``."""
        deletes = sum(1 for _, units in self.changes if units is None)
        counts = [(len(self.changes) - deletes, "upsert"), (deletes, "delete")]
        parts = [f"{n} {word}{'' if n == 1 else 's'}" for n, word in counts if n]
        return f"{self.label} ({', '.join(parts)})"


@dataclass(frozen=True)
class AppState:
    """What a read_committed reader of the changelog must end up with."""

    stock: dict[str, int]
    position: Position
    committed_changes: int
    """Records in committed transactions (each one is delivered exactly once)."""


def inventory_script() -> list[Transaction]:
    """The app's transactions: phase 1 (before the Spark query starts), 2 (while it runs) and
    3 (one sale, the write the demo's position-bounded read waits for)."""
    stock: dict[str, int] = {}
    script: list[Transaction] = []

    def commit(phase: int, label: str, changes: list[tuple[str, int | None]]) -> None:
        script.append(Transaction(phase, label, tuple(changes)))
        for key, units in changes:
            if units is None:
                stock.pop(key, None)
            else:
                stock[key] = units

    commit(
        1,
        f"opening stock for {_ITEMS} items",
        [(item(i), 20 + (i * 37) % 80) for i in range(_ITEMS)],
    )
    sold = [3, 7, 11, 18, 21, 25, 30, 36, 42, 47]
    commit(1, "orders shipped", [(item(i), stock[item(i)] - (i % 5 + 1)) for i in sold])
    commit(1, "item-013 discontinued", [(item(13), None), (item(14), stock[item(14)] + 10)])
    # A commit that fails half-way (Kafka Streams aborts the transaction and reprocesses):
    # its records are in the log but read_committed readers must never see them.
    script.append(
        Transaction(
            1,
            f"item-042 and item-007 set to {ABORTED_STOCK}, item-030 deleted",
            ((item(42), ABORTED_STOCK), (item(7), ABORTED_STOCK), (item(30), None)),
            aborted=True,
        )
    )
    commit(1, "restock", [(item(7), stock[item(7)] + 40), (item(30), stock[item(30)] + 10)])
    commit(
        2, "item-042 restocked, item-050 added", [(item(42), stock[item(42)] + 100), (item(50), 75)]
    )
    commit(2, "item-021 discontinued", [(item(21), None)])
    commit(3, f"{SOLD_ITEM} sold", [(SOLD_ITEM, stock[SOLD_ITEM] - SOLD)])
    return script


def _partition(key: str) -> int:
    return partition_for_key(key.encode(), PARTITIONS)


def expected_state(up_to_phase: int) -> AppState:
    """The committed state after every transaction of phases ``<= up_to_phase``."""
    stock: dict[str, int] = {}
    offsets: dict[int, int] = {}
    committed = 0
    for txn in inventory_script():
        if txn.phase > up_to_phase:
            break
        if txn.aborted:
            continue  # its input offsets are processed again by the next commit
        committed += len(txn.changes)
        for key, units in txn.changes:
            partition = _partition(key)
            offsets[partition] = offsets.get(partition, -1) + 1
            if units is None:
                stock.pop(key, None)
            else:
                stock[key] = units
    return AppState(stock, Position.from_map({INPUT_TOPIC: offsets}), committed)


class InventoryApp:
    """The app's changelog writer: one Kafka transaction per :class:`Transaction`.

    Like a Kafka Streams task per input partition, a change for key ``k`` processes the next
    input record of partition ``murmur2(k) % 4`` of ``inventory-orders`` and is logged to the
    same changelog partition with the task's position in its ``c`` header.
    """

    def __init__(self, bootstrap_servers: str) -> None:
        from confluent_kafka import Producer

        self._producer: Producer = Producer(
            {
                "bootstrap.servers": bootstrap_servers,
                "transactional.id": f"{APP_ID}-0_0",
                "linger.ms": 5,
            }
        )
        self._producer.init_transactions(30)
        self._offsets: dict[int, int] = {}  # input partition -> last committed offset
        self.last_written = Position.empty()
        """Changelog partition -> offset of the last record the last transaction committed."""

    def run(self, txn: Transaction) -> Position:
        """Write one transaction (commit or abort it); returns the app's committed position.

        Afterwards :attr:`last_written` holds the changelog coordinates of the records this
        transaction committed (empty for an aborted one).
        """
        offsets = dict(self._offsets)
        delivered: list[tuple[int, int]] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                delivered.append((msg.partition(), msg.offset()))

        self._producer.begin_transaction()
        for key, units in txn.changes:
            partition = _partition(key)
            offsets[partition] = offsets.get(partition, -1) + 1
            task_position = Position.from_map({INPUT_TOPIC: {partition: offsets[partition]}})
            self._producer.produce(
                CHANGELOG,
                key=key.encode(),
                value=None if units is None else encode_stock(units),
                partition=partition,
                headers=[
                    ("v", b"\x00"),
                    ("c", encode_position(task_position, pad_like_kafka_streams=True)),
                ],
                on_delivery=on_delivery,
            )
        # Flushing serves the delivery reports: they carry the records' changelog offsets.
        self._producer.flush(30)  # for an aborted transaction: the records really land...
        written: dict[int, int] = {}
        if txn.aborted:
            self._producer.abort_transaction(30)  # ...and are then aborted
        else:
            self._producer.commit_transaction(30)
            self._offsets = offsets
            for partition, offset in delivered:
                written[partition] = max(offset, written.get(partition, -1))
        self.last_written = Position.from_map({CHANGELOG: written}) if written else Position.empty()
        return Position.from_map({INPUT_TOPIC: self._offsets})

    def close(self) -> None:
        self._producer.flush(30)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the app: read phase numbers from stdin, write each phase's transactions."""
    parser = argparse.ArgumentParser(
        prog="python -m spark_statestore.demo.app", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers")
    args = parser.parse_args(argv)
    app = InventoryApp(args.bootstrap_servers)
    script = inventory_script()
    number = 0
    position = Position.empty()
    try:
        for line in sys.stdin:
            phase = int(line)
            written = Position.empty()
            for txn in (t for t in script if t.phase == phase):
                number += 1
                position = app.run(txn)
                written = written.merge(app.last_written)
                if txn.aborted:
                    print(
                        f"transaction {number} ABORTED:   {txn.label} (must never be seen)",
                        flush=True,
                    )
                else:
                    print(f"transaction {number} committed: {txn.describe()}", flush=True)
            print(f"position after phase {phase}: {position.to_json()}", flush=True)
            print(f"done {phase} {written.to_json()}", flush=True)
    finally:
        app.close()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
