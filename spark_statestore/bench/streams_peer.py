"""The repository's Kafka Streams app as the ``streams`` bench suite's peer.

:class:`StreamsPeer` runs ``interop/kafka-streams`` (through
:class:`~spark_statestore.connectors.kafka.local.streams_app.StreamsApp`) with only its
``totals`` store, feeds it orders, lets it build its RocksDB store and restarts it on an empty
state directory; :func:`restore_timing` reads Kafka Streams' own timing of a restore from the
app's event lines. What the suite measures with it: :mod:`spark_statestore.bench.streams`.
"""

from __future__ import annotations

import logging
import shutil
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.follower import PARTITIONS, RESTORE_DEADLINE_S, Changelog
from spark_statestore.position import Position

if TYPE_CHECKING:
    from spark_statestore.connectors.kafka.local.streams_app import StreamsApp

_log = logging.getLogger(__name__)

__all__ = [
    "APPLICATION_ID",
    "CHANGELOG",
    "COMMIT_INTERVAL_MS",
    "KEY_FORMAT",
    "LONG",
    "ORDERS_TOPIC",
    "SESSION_TIMEOUT_MS",
    "STORE",
    "SUITE",
    "Orders",
    "StreamsPeer",
    "StreamsRestore",
    "restore_timing",
]

SUITE = "streams"
ORDERS_TOPIC = "bench-orders"
APPLICATION_ID = "bench-streams"
STORE = "totals"
CHANGELOG = f"{APPLICATION_ID}-{STORE}-changelog"
COMMIT_INTERVAL_MS = 100
"""The app's commit interval (Kafka Streams' default under exactly-once)."""
SESSION_TIMEOUT_MS = 6_000
"""The app's consumer session timeout: the broker's minimum, so a restart waits least."""
KEY_FORMAT = b"cust-%011d"  # 16 bytes
LONG = struct.Struct(">q")
"""Amounts and totals: Kafka's ``LongSerializer``."""
_POLL_S = 0.5
"""How often the app's committed offsets and its group are sampled (nothing notifies them)."""


# -- Kafka Streams' own timing ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StreamsRestore:
    """One Kafka Streams start on an empty state directory, as the app reported it."""

    start_to_running_s: float
    """``KafkaStreams#start()`` to the RUNNING state."""
    restore_s: float
    """First ``onRestoreStart`` to last ``onRestoreEnd`` of the store's partitions."""
    restored: int
    """Records Kafka Streams restored into the store (the sum of ``onRestoreEnd``'s)."""
    partitions: int
    """Changelog partitions restored."""


def restore_timing(events: Sequence[Mapping[str, Any]], store: str) -> StreamsRestore:
    """Kafka Streams' restore of ``store`` from the app's event lines.

    Parameters
    ----------
    events
        The app's events of one run, in order (``starting``, ``state``, ``restore-start``,
        ``restore-end``), each with ``at`` (epoch ms).
    store
        The store whose restore is timed.

    Raises
    ------
    BenchError
        If the events lack the start, RUNNING, or a complete restore of ``store``.
    """

    def at(event: Mapping[str, Any]) -> int:
        value = event.get("at")
        if isinstance(value, bool) or not isinstance(value, int):
            raise BenchError(f"bench suite {SUITE}: the app's event {dict(event)} has no 'at'")
        return value

    started = next((at(e) for e in events if e.get("event") == "starting"), None)
    running = next(
        (at(e) for e in events if e.get("event") == "state" and e.get("state") == "RUNNING"),
        None,
    )
    starts: dict[tuple[str, int], int] = {}
    ends: dict[tuple[str, int], tuple[int, int]] = {}
    for event in events:
        if event.get("store") != store:
            continue
        where = (str(event.get("topic")), int(event.get("partition", -1)))
        if event.get("event") == "restore-start":
            starts.setdefault(where, at(event))
        elif event.get("event") == "restore-end":
            ends[where] = (at(event), int(event.get("restored", 0)))
    if started is None or running is None:
        raise BenchError(
            f"bench suite {SUITE}: the app reported no start or no RUNNING state: {list(events)}"
        )
    if not starts or set(starts) != set(ends):
        raise BenchError(
            f"bench suite {SUITE}: Kafka Streams did not report a complete restore of "
            f"{store!r} (started {sorted(starts)}, ended {sorted(ends)})"
        )
    first, last = min(starts.values()), max(end for end, _ in ends.values())
    return StreamsRestore(
        start_to_running_s=(running - started) / 1000,
        restore_s=max(last - first, 1) / 1000,  # the JVM clock counts milliseconds
        restored=sum(restored for _, restored in ends.values()),
        partitions=len(starts),
    )


@dataclass(slots=True)
class Orders:
    """What the producer wrote: the last customer of each partition, the last offsets."""

    records: int
    last_keys: dict[int, tuple[bytes, int]] = field(default_factory=dict)
    last_offsets: dict[int, int] = field(default_factory=dict)


class StreamsPeer:
    """The app, its state directory, and the suite's steps with it."""

    def __init__(self, root: Path, bootstrap: str) -> None:
        self.root = root
        self.bootstrap = bootstrap
        self.state_dir = root / "streams-state"
        self.build_seconds = 0.0
        self._runs = 0

    def app(self) -> StreamsApp:
        from spark_statestore.connectors.kafka.local.streams_app import StreamsApp

        self._runs += 1
        return StreamsApp(
            self.bootstrap,
            self.state_dir,
            application_id=APPLICATION_ID,
            input_topic=ORDERS_TOPIC,
            position_headers=True,
            settings={
                "stores": STORE,
                "commit-interval-ms": COMMIT_INTERVAL_MS,
                "session-timeout-ms": SESSION_TIMEOUT_MS,
            },
            log_path=self.root / f"streams-app-{self._runs}.log",
        )

    # -- setup ----------------------------------------------------------------------------
    def produce_orders(self, records: int, per_transaction: int) -> Orders:
        from confluent_kafka import KafkaException, Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": f"spark-statestore-bench-{ORDERS_TOPIC}",
                "linger.ms": 50,
                "queue.buffering.max.messages": 1_000_000,
            }
        )
        orders = Orders(records)

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                p = msg.partition()
                orders.last_offsets[p] = max(msg.offset(), orders.last_offsets.get(p, -1))

        try:
            producer.init_transactions(60)
            for start in range(0, records, per_transaction):
                producer.begin_transaction()
                for i in range(start, min(start + per_transaction, records)):
                    partition = i % PARTITIONS
                    key, amount = KEY_FORMAT % i, i + 1
                    while True:
                        try:
                            producer.produce(
                                ORDERS_TOPIC,
                                key=key,
                                value=LONG.pack(amount),
                                partition=partition,
                                on_delivery=delivered,
                            )
                            break
                        except BufferError:  # the local queue is full: let it drain
                            producer.poll(0.05)
                    orders.last_keys[partition] = (key, amount)
                producer.commit_transaction(120)
        except KafkaException as exc:
            raise BenchError(
                f"bench suite {SUITE}: producing the orders to {ORDERS_TOPIC} failed: {exc}"
            ) from exc
        if len(orders.last_offsets) != len(orders.last_keys):
            raise BenchError(f"bench suite {SUITE}: some orders were not delivered")
        return orders

    def build(self, orders: Orders, then: Callable[[StreamsApp], Orders]) -> Changelog:
        """Let the app build its store from every order, run ``then(app)`` with it (which
        may write more orders, one per new customer, and returns them), wait until the app
        has processed those too and stop it; returns its changelog."""
        from spark_statestore.connectors.kafka.follower.leader import KafkaLeaderProgress

        progress = KafkaLeaderProgress(self.bootstrap, APPLICATION_ID, CHANGELOG, PARTITIONS)
        start = time.perf_counter()
        app = self.app()
        try:
            app.start(RESTORE_DEADLINE_S)
            self._wait_processed(app, progress, orders.last_offsets)
            self.build_seconds = time.perf_counter() - start
            self.check_answers(app, orders)
            more = then(app)
            last = {
                p: max(orders.last_offsets.get(p, -1), more.last_offsets.get(p, -1))
                for p in range(PARTITIONS)
            }
            ends = self._wait_processed(app, progress, last)
        finally:
            app.stop()
            progress.close()
        _log.info(
            "bench suite %s: Kafka Streams built its store from %d orders in %.1f s",
            SUITE,
            orders.records,
            self.build_seconds,
        )
        return Changelog(
            bootstrap=self.bootstrap,
            records=orders.records + more.records,  # one changelog record per customer
            transactions=0,  # Kafka Streams' own commits, not counted
            end_offsets=ends,
            last_records={p: (k, LONG.pack(a)) for p, (k, a) in orders.last_keys.items()},
            topic=CHANGELOG,
            suite=SUITE,
        )

    def _wait_processed(
        self, app: StreamsApp, progress: Any, last_offsets: Mapping[int, int]
    ) -> dict[int, int]:
        """Wait until the app has committed every order up to ``last_offsets``; returns its
        changelog's end offsets read afterwards."""
        wanted = Position.from_map(
            {ORDERS_TOPIC: {p: o for p, o in last_offsets.items() if o >= 0}}
        )
        deadline = time.monotonic() + RESTORE_DEADLINE_S
        pause = threading.Event()  # never set: a bounded pause between samples
        committed = Position.empty()
        while True:
            sampled = progress.sample()
            if sampled is not None:
                committed, ends = sampled
                if committed.dominates(wanted):
                    return dict(ends)
            if time.monotonic() > deadline:
                raise BenchError(
                    f"bench suite {SUITE}: the Kafka Streams app did not process every "
                    f"order within {RESTORE_DEADLINE_S:.0f} s (committed {committed}, "
                    f"orders up to {wanted}); see {app.log_path}"
                )
            pause.wait(_POLL_S)

    def check_answers(self, app: StreamsApp, orders: Orders) -> None:
        """Fail unless the app's IQv2 KeyQuery of the last customer of every partition
        answers its amount."""
        for key, amount in orders.last_keys.values():
            answer = app.query("key", STORE, key.decode())
            rows = answer.get("rows") or []
            if not answer.get("ok") or [r.get("value") for r in rows] != [amount]:
                raise BenchError(
                    f"bench suite {SUITE}: Kafka Streams answers {answer} for {key!r}, "
                    f"expected {amount}; see {app.log_path}"
                )

    # -- Kafka Streams' restore -----------------------------------------------------------
    def restore_run(self, changelog: Changelog, restores: list[StreamsRestore]) -> float:
        """Restart the app on an empty state directory; its restore rate (records/s)."""
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.wait_group_empty()
        app = self.app()
        try:
            app.start(RESTORE_DEADLINE_S)
            timing = restore_timing(app.events(), STORE)
            orders = Orders(
                changelog.records,
                last_keys={
                    p: (k, LONG.unpack(v)[0]) for p, (k, v) in changelog.last_records.items()
                },
            )
            self.check_answers(app, orders)
        finally:
            app.stop()
        if timing.restored != changelog.records or timing.partitions != PARTITIONS:
            raise BenchError(
                f"bench suite {SUITE}: Kafka Streams restored {timing.restored:,} records from "
                f"{timing.partitions} partitions, the changelog has {changelog.records:,} in "
                f"{PARTITIONS}; its rate would be meaningless"
            )
        restores.append(timing)
        _log.info(
            "bench suite %s: Kafka Streams restored %d records in %.2f s (start to RUNNING %.2f s)",
            SUITE,
            timing.restored,
            timing.restore_s,
            timing.start_to_running_s,
        )
        return changelog.records / timing.restore_s

    def wait_group_empty(self) -> None:
        """Wait until the stopped app's member has left the consumer group (Kafka Streams
        does not leave on close; its session expires), so a restart does not wait for it."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + SESSION_TIMEOUT_MS / 1000 + 60
        pause = threading.Event()
        while True:
            try:
                group = admin.describe_consumer_groups([APPLICATION_ID])[APPLICATION_ID].result(30)
            except KafkaException as exc:
                raise BenchError(
                    f"bench suite {SUITE}: cannot describe the group {APPLICATION_ID}: {exc}"
                ) from exc
            if not group.members:
                return
            if time.monotonic() > deadline:
                raise BenchError(
                    f"bench suite {SUITE}: the stopped app's consumer group {APPLICATION_ID} "
                    f"still has members {SESSION_TIMEOUT_MS / 1000 + 60:.0f} s later"
                )
            pause.wait(_POLL_S)
