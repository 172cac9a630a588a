"""The demo's "other application": the repository's Kafka Streams app, and the orders it gets.

The app is ``interop/kafka-streams`` (Kafka Streams 4.3.1, a separate JVM, run through
:class:`~spark_statestore.connectors.kafka.local.streams_app.StreamsApp`) with the
application id ``shop-app``: it reads the orders topic ``shop-orders`` (key: the customer id
as UTF-8, value: the amount as an 8-byte big-endian long) exactly-once (v2) with position
headers on, and keeps, among its stores, ``totals`` (customer -> sum of their amounts) in
RocksDB, logged by Kafka Streams to ``shop-app-totals-changelog``: the changelog the demo
follows.

The demo writes the orders itself, in transactions of a transactional producer, from a fixed
script (:func:`orders_script`), so it knows what to expect (:func:`expected_totals`). One
transaction of phase 1 is aborted: the app reads its input read_committed, so those orders
never count. :class:`ShopApp` writes a phase and waits, on a read_committed consumer of the
changelog, until the app has logged the effect of every order of it (the ``c`` headers of
its records reach the orders' offsets); it returns the changelog coordinates of those records
and the orders' position. Kafka clients are imported when the demo runs, never at module
import.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_statestore.changelog import partition_for_key
from spark_statestore.demo.errors import DemoError
from spark_statestore.demo.output import WAIT_S, count, say
from spark_statestore.position import Position

if TYPE_CHECKING:
    from spark_statestore.connectors.kafka.local.streams_app import StreamsApp

__all__ = [
    "ABORTED_AMOUNT",
    "APP_ID",
    "CHANGELOG",
    "INPUT_TOPIC",
    "ORDERED",
    "ORDER_CUSTOMER",
    "PARTITIONS",
    "STATE_DIR",
    "STORE",
    "Phase",
    "ShopApp",
    "Transaction",
    "customer",
    "decode_amount",
    "expected_totals",
    "orders_script",
    "shop_app",
]

APP_ID = "shop-app"
STORE = "totals"
CHANGELOG = f"{APP_ID}-{STORE}-changelog"
INPUT_TOPIC = "shop-orders"
PARTITIONS = 4
STATE_DIR = "kafka-streams-state"
"""Kafka Streams' state directory (its RocksDB stores), in the demo's work directory."""
ABORTED_AMOUNT = 999_999
"""The amount of the aborted orders: no total may ever include it."""
ORDER_CUSTOMER = "cust-042"
ORDERED = 12
"""The amount of :data:`ORDER_CUSTOMER`'s order in phase 3."""

_CUSTOMERS = 50
_LONG = struct.Struct(">q")


def customer(number: int) -> str:
    """The key of customer ``number``: ``cust-042``."""
    return f"cust-{number:03d}"


def decode_amount(value: bytes) -> int:
    """An 8-byte big-endian long (Kafka's ``LongSerializer``)."""
    return int(_LONG.unpack(value)[0])


@dataclass(frozen=True)
class Transaction:
    """One transaction of orders ``(customer, amount)``, committed or aborted."""

    phase: int
    label: str
    orders: tuple[tuple[str, int], ...]
    aborted: bool = False


def orders_script() -> list[Transaction]:
    """The demo's orders: phase 1 (before the Spark query starts), 2 (while it runs) and 3
    (one order, the write the demo's position-bounded read waits for)."""
    first = tuple((customer(i), 20 + (i * 37) % 80) for i in range(_CUSTOMERS))
    again = tuple((customer(i), i % 5 + 1) for i in (3, 7, 11, 18, 21, 25, 30, 36, 42, 47))
    return [
        Transaction(1, f"first orders of {_CUSTOMERS} customers", first),
        Transaction(1, "repeat orders", again),
        Transaction(
            1,
            f"cust-042 and cust-007 order {ABORTED_AMOUNT}",
            ((customer(42), ABORTED_AMOUNT), (customer(7), ABORTED_AMOUNT)),
            aborted=True,
        ),
        Transaction(1, "two big orders", ((customer(7), 40), (customer(30), 10))),
        Transaction(2, "cust-042 orders again", ((customer(42), 100),)),
        Transaction(2, "a new customer, cust-050", ((customer(50), 75),)),
        Transaction(3, f"{ORDER_CUSTOMER} orders {ORDERED}", ((ORDER_CUSTOMER, ORDERED),)),
    ]


def expected_totals(up_to_phase: int) -> dict[str, int]:
    """What the app's ``totals`` store holds after phases ``<= up_to_phase``: the sum of
    each customer's committed orders."""
    totals: dict[str, int] = {}
    for txn in orders_script():
        if txn.phase <= up_to_phase and not txn.aborted:
            for key, amount in txn.orders:
                totals[key] = totals.get(key, 0) + amount
    return totals


@dataclass(frozen=True)
class Phase:
    """What a phase wrote and where the app logged it."""

    orders: Position
    """The app's input position after the phase: per orders partition, the offset of the
    last committed order (what the ``c`` headers of the app's records reach)."""
    written: Position
    """The changelog coordinates of the app's records for the phase: per changelog
    partition, the offset of the last one."""


class ShopApp:
    """The running app, the demo's orders producer and a reader of the app's changelog.

    Parameters
    ----------
    app
        The started Kafka Streams app.
    bootstrap
        The broker.
    """

    def __init__(self, app: StreamsApp, bootstrap: str) -> None:
        from confluent_kafka import Producer, TopicPartition

        from spark_statestore.connectors.kafka import clients, logs

        self.app = app
        # Its librdkafka lines through logging, as every client of ours: the terminal stays
        # the demo's when the broker stops.
        self._producer: Any = Producer(
            logs.routed(
                {"bootstrap.servers": bootstrap, "transactional.id": "spark-statestore-demo-orders"}
            )
        )
        self._producer.init_transactions(30)
        self._changelog = clients.consumer(
            bootstrap, None, group="spark-statestore-demo", what=f"changelog {CHANGELOG!r}"
        )
        self._changelog.assign([TopicPartition(CHANGELOG, p, 0) for p in range(PARTITIONS)])
        self._orders = Position.empty()
        self._seen = Position.empty()  # merged c headers of the changelog records read
        self._number = 0

    def run_phase(self, phase: int) -> Phase:
        """Write ``phase``'s transactions, printing a line each, and wait until the app has
        logged every order of it to its changelog."""
        for txn in (t for t in orders_script() if t.phase == phase):
            self._number += 1
            self._write(txn)
            orders = count(len(txn.orders), "order")
            if txn.aborted:
                say(f"transaction {self._number} ABORTED:   {txn.label} (must never count)")
            else:
                say(f"transaction {self._number} committed: {txn.label} ({orders})")
        written = self._read_changelog_until(self._orders)
        say(f"the app has logged phase {phase}: {CHANGELOG} records up to {written.to_json()}")
        return Phase(self._orders, written)

    def _write(self, txn: Transaction) -> None:
        delivered: list[tuple[int, int]] = []
        failed: list[Any] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                delivered.append((msg.partition(), msg.offset()))
            else:
                failed.append(err)

        self._producer.begin_transaction()
        for key, amount in txn.orders:
            self._producer.produce(
                INPUT_TOPIC,
                key=key.encode(),
                value=_LONG.pack(amount),
                # Kafka's Java partitioner: a reader of the topic finds keys where it expects
                partition=partition_for_key(key.encode(), PARTITIONS),
                on_delivery=on_delivery,
            )
        self._producer.flush(30)  # the delivery reports carry the orders' offsets
        if failed:
            raise DemoError(f"orders were not delivered to {INPUT_TOPIC}: {failed}")
        if txn.aborted:
            self._producer.abort_transaction(30)  # the orders are in the log, then aborted
            return
        self._producer.commit_transaction(30)
        for partition, offset in delivered:
            self._orders = self._orders.merge(Position.from_map({INPUT_TOPIC: {partition: offset}}))

    def _read_changelog_until(self, orders: Position) -> Position:
        """Read the app's changelog (read_committed) until its ``c`` headers reach
        ``orders``; the changelog coordinates of the records read meanwhile."""
        from confluent_kafka import KafkaError

        from spark_statestore.connectors.kafka.tail import message_to_record

        written: dict[int, int] = {}
        deadline = time.monotonic() + WAIT_S
        while not self._seen.dominates(orders):
            if time.monotonic() > deadline:
                raise DemoError(
                    f"the Kafka Streams app did not log orders up to {orders} within "
                    f"{WAIT_S:.0f} s (its changelog reached {self._seen}); see {self.app.log_path}"
                )
            for message in self._changelog.consume(500, timeout=1.0):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise DemoError(f"reading {CHANGELOG} failed: {error}")
                record = message_to_record(message)
                written[record.partition] = record.offset
                if record.position is not None:
                    self._seen = self._seen.merge(record.position)
        return Position.from_map({CHANGELOG: written}) if written else Position.empty()

    def close(self) -> None:
        """Close the producer and the changelog reader (the app is stopped by its owner).

        The producer is destroyed here, not when the demo's objects are collected after the
        broker has stopped (its threads would log the lost connections)."""
        self._producer.flush(30)
        self._producer = None  # the last reference: librdkafka closes it now
        self._changelog.close()


@contextmanager
def shop_app(workdir: Path, bootstrap: str) -> Iterator[ShopApp]:
    """Start the Kafka Streams app (its JVM logging to ``app.log``, its state in
    :data:`STATE_DIR`) and return once it is RUNNING; on exit, even after an error, the
    clients are closed and the app is stopped (cleanly; killed if it does not exit)."""
    from spark_statestore.connectors.kafka.local.streams_app import StreamsApp

    app = StreamsApp(
        bootstrap,
        workdir / STATE_DIR,
        application_id=APP_ID,
        input_topic=INPUT_TOPIC,
        position_headers=True,
        log_path=workdir / "app.log",
    )
    started = time.monotonic()
    app.start()  # kills the JVM itself if it does not reach RUNNING
    try:
        say(f"Kafka Streams is RUNNING ({time.monotonic() - started:.0f} s): {_describe(app)}")
        shop = ShopApp(app, bootstrap)
        try:
            yield shop
        finally:
            shop.close()
    finally:
        app.stop()  # killed if it does not exit in time


def _describe(app: StreamsApp) -> str:
    states = [e["state"] for e in app.events() if e.get("event") == "state"]
    return " -> ".join(["CREATED", *states])
