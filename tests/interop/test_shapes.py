"""Against real Kafka Streams topologies of several sub-topologies (the interop jar's
``ShapesApp``): our follower's replica of each store equals Kafka Streams' own IQv2 answer,
key for key, for stores behind internal topics.

The shapes: a ``groupBy`` to a new key (``regroup``), a stream-table join after a key change
(``joined``), a foreign-key table-table join (``fkjoined``), a windowed count after a
``groupBy`` (``windowed``) and two repartitions in a row (``chained``), all in one app, run
once with position headers and once without, each on its own input topics with the same
workload in two phases: orders over several prefixes, labels changed, deleted and added,
customers moving region or deleted, shipments reassigned or deleted. The app has applied a
phase when its group has committed the inputs' ends and then, level by level, the ends of
every internal topic it reads (DESIGN.md §5, "Several sub-topologies"); its changelogs are
then followed to their ends.
"""

from __future__ import annotations

import random
import re
import struct
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from spark_statestore.changelog import decode_window_key
from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.kafka.local.shapes_app import SHAPES, SHAPES_INPUTS, StreamsShapes
from spark_statestore.position import Position
from tests.interop.test_kafka_streams import (
    PARTITIONS,
    long_value,
    replica,
    wait_until_processed,
)
from tests.kafka_util import settled_changelog, wait_until_settled

pytestmark = pytest.mark.integration

REGIONS = ("north", "south", "east", "west", "mid")
WALK_INS = ("walkin", "online")
"""Order keys without ``:``: their prefix is the whole key. ``online`` never has a label."""
ORDERS = 600
CUSTOMERS = 20
SHIPMENTS = 120
WINDOW_MS = 100

UPSTREAM = {
    "regroup": {"orders": 1},
    "joined": {"orders": 1},
    "fkjoined": {"shipments": 2, "customers": 1},
    "windowed": {"orders": 1},
    "chained": {"orders": 2},
}
"""Each store's input topics (by role) and how many internal topics lie between each and
the store, at the most: the foreign-key join's left side goes through its subscription
registration and response topics, its right side through the response topic."""


def prefix(key: str) -> str:
    return key.split(":", 1)[0]


Event = tuple[str, str, "str | int | None"]
"""An input record: the topic's role, the key, the value (None: a tombstone, or a cancelled
order)."""


def workload_events(seed: int) -> tuple[list[Event], list[Event]]:
    """Two phases of input records. The first: labels, customers, shipments and half of the
    orders, a label changing midway. The second: the other orders with, in between, a label
    deleted and one added, customers moving region or deleted, shipments reassigned or
    deleted (so the deletions reach rows the stores have committed)."""
    rng = random.Random(seed)
    customer_ids = [f"c{i:02d}" for i in range(CUSTOMERS)]
    first: list[Event] = [("labels", r, r.upper()) for r in ("north", "south", "east", "west")]
    first.append(("labels", "walkin", "WALK-IN"))
    first += [("customers", c, rng.choice(REGIONS)) for c in customer_ids]
    # Customers c20..c23 never exist: their shipments are dropped by the inner join.
    first += [
        ("shipments", f"s{i:03d}", f"c{rng.randrange(CUSTOMERS + 4):02d}") for i in range(SHIPMENTS)
    ]
    changes: list[Event] = [
        ("customers", rng.choice(customer_ids), rng.choice(REGIONS)) for _ in range(10)
    ]
    changes += [("customers", c, None) for c in rng.sample(customer_ids, 2)]
    changes += [
        ("shipments", f"s{rng.randrange(SHIPMENTS):03d}", rng.choice(customer_ids))
        for _ in range(25)
    ]
    changes += [("shipments", f"s{i:03d}", None) for i in rng.sample(range(SHIPMENTS), 10)]
    rng.shuffle(changes)
    label_changes: dict[int, Event] = {
        ORDERS // 4: ("labels", "north", "NORTH-2"),
        ORDERS // 2: ("labels", "east", None),
        3 * ORDERS // 4: ("labels", "mid", "MID"),
    }
    second: list[Event] = []
    for i in range(ORDERS):
        phase = first if i < ORDERS // 2 else second
        if i in label_changes:
            phase.append(label_changes[i])
        if phase is second and i % 7 == 0 and changes:
            phase.append(changes.pop())
        if rng.random() < 0.15:
            key = rng.choice(WALK_INS)
        else:
            key = f"{rng.choice(REGIONS)}:c{rng.randrange(8)}"
        phase.append(("orders", key, None if rng.random() < 0.05 else rng.randrange(1, 1000)))
    return first, second + changes


class Workload:
    """What was produced to the input topics (by role): their ends, and what the stores must
    hold."""

    def __init__(self, inputs: dict[str, str]) -> None:
        self.inputs = inputs
        self.ends: dict[str, dict[int, int]] = {}
        self.orders: list[tuple[str, int | None]] = []
        self.labelled: set[str] = set()
        """The prefixes that had a label at some point."""
        self.tables: dict[str, dict[str, str]] = {"labels": {}, "customers": {}, "shipments": {}}
        """Each table's rows at the end (deleted ones absent)."""
        self._start = int(time.time() * 1000)
        self._produced = 0

    def produce(self, bootstrap: str, events: list[Event]) -> None:
        """Produce ``events``, each record's timestamp 2 ms after the last's; then
        :attr:`ends` are the input topics' ends."""
        # Kafka Streams routes repartition and subscription records by Java's murmur2; tables
        # produced with librdkafka's default partitioner (CRC32) would not be co-partitioned
        # with them, and the joins would miss.
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "partitioner": "murmur2_random",
            }
        )
        for role, key, value in events:
            if role == "orders":
                amount = value if isinstance(value, int) else None
                self.orders.append((key, amount))
                data = None if amount is None else struct.pack(">q", amount)
            elif isinstance(value, str):
                self.tables[role][key] = value
                if role == "labels":
                    self.labelled.add(key)
                data = value.encode()
            else:
                self.tables[role].pop(key, None)
                data = None
            timestamp = self._start + 2 * self._produced
            producer.produce(self.inputs[role], key=key.encode(), value=data, timestamp=timestamp)
            self._produced += 1
        assert producer.flush(30) == 0
        self.ends = {topic: wait_until_settled(bootstrap, topic) for topic in self.inputs.values()}

    def order_counts(self) -> dict[str, int]:
        """Orders per prefix, cancellations (null amounts) left out as Kafka Streams' counts
        leave them."""
        return dict(Counter(prefix(key) for key, amount in self.orders if amount is not None))


# -- the app's topology, from the text of Topology#describe() --------------------------------
@dataclass
class Node:
    kind: str  # Source, Processor or Sink
    topics: list[str]  # a source's topics, a sink's topic
    stores: list[str]
    successors: list[str]


_NODE = re.compile(r"^\s*(Source|Processor|Sink): (\S+) \((.*)\)\s*$")
_EDGES = re.compile(r"^\s*--> (.*)$")


def parse_topology(text: str) -> dict[str, Node]:
    """The nodes of a described topology by name (node names are unique across it)."""
    nodes: dict[str, Node] = {}
    current: Node | None = None
    for line in text.splitlines():
        if found := _NODE.match(line):
            kind, name, details = found.groups()
            listed = re.search(r"\[(.*)\]", details)
            items = [n.strip() for n in listed.group(1).split(",") if n.strip()] if listed else []
            topic = re.fullmatch(r"topic: (\S+)", details)
            current = nodes[name] = Node(
                kind,
                topics=items if kind == "Source" else [topic.group(1)] if topic else [],
                stores=items if kind == "Processor" else [],
                successors=[],
            )
        elif (edges := _EDGES.match(line)) and current is not None:
            current.successors = [n.strip() for n in edges.group(1).split(",") if n != "none"]
    return nodes


def internal_topics(nodes: dict[str, Node]) -> set[str]:
    """Topics the topology both writes and reads (its repartition and subscription topics),
    as described: without the application id prefix."""
    written = {t for node in nodes.values() if node.kind == "Sink" for t in node.topics}
    read = {t for node in nodes.values() if node.kind == "Source" for t in node.topics}
    return written & read


def upstream(nodes: dict[str, Node], store: str) -> dict[str, int]:
    """Every topic upstream of ``store`` -> the most internal topics between it and the
    store (an internal topic is followed back to the sinks that write it)."""
    predecessors: dict[str, list[str]] = {name: [] for name in nodes}
    writers: dict[str, list[str]] = {}
    for name, node in nodes.items():
        for successor in node.successors:
            predecessors[successor].append(name)
        if node.kind == "Sink":
            for topic in node.topics:
                writers.setdefault(topic, []).append(name)
    found: dict[str, int] = {}

    def walk(name: str, hops: int, through: frozenset[str]) -> None:
        for topic in nodes[name].topics if nodes[name].kind == "Source" else []:
            found[topic] = max(found.get(topic, 0), hops)
            if topic not in through:
                for sink in writers.get(topic, []):
                    walk(sink, hops + 1, through | {topic})
        for predecessor in predecessors[name]:
            walk(predecessor, hops, through)

    for name, node in nodes.items():
        if store in node.stores:
            walk(name, 0, frozenset())
    return found


def wait_until_caught_up(
    bootstrap: str, app: StreamsShapes, ends: dict[str, dict[int, int]]
) -> None:
    """Until the app has applied every input record up to ``ends`` to every store.

    Its group's committed offsets reach the ends of the input topics its topology reads;
    then, level by level, the ends of every internal topic it reads (read once no transaction
    is open on it) are read and the group's committed offsets wait for them. When a level
    reads the ends the previous one waited for, nothing was written since: each transaction
    that consumed a record wrote its outputs with it, so every effect of the inputs is
    committed, changelogs included.
    """
    nodes = parse_topology(app.topology)
    internal = internal_topics(nodes)
    read = {t for node in nodes.values() if node.kind == "Source" for t in node.topics}
    for topic in sorted(read - internal):
        wait_until_processed(bootstrap, app, topic, ends[topic])
    reached: dict[str, dict[int, int]] = {}
    while True:
        level = {
            topic: wait_until_settled(bootstrap, topic)
            for topic in sorted(f"{app.application_id}-{t}" for t in internal)
        }
        if level == reached:
            return
        for topic, topic_ends in level.items():
            wait_until_processed(bootstrap, app, topic, topic_ends)
        reached = level


# -- one app per position-headers setting, with its own inputs -------------------------------
@pytest.fixture(scope="module", params=[True, False], ids=["position-headers", "no-headers"])
def shapes(
    request: pytest.FixtureRequest,
    kafka_broker: LocalKafkaCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[StreamsShapes, Workload]]:
    """The app with every shape, once it has applied both phases of the workload (the
    second produced once it has applied the first)."""
    headers: bool = request.param
    name = "shapes-headers" if headers else "shapes-no-headers"
    bootstrap = kafka_broker.bootstrap_servers
    workload = Workload({role: f"{name}-in-{role}" for role in SHAPES_INPUTS})
    for topic in workload.inputs.values():
        kafka_broker.create_topic(topic, PARTITIONS, compacted=False)
    app = StreamsShapes(
        bootstrap,
        tmp_path_factory.mktemp(name) / "state",
        inputs=workload.inputs,
        application_id=name,
        position_headers=headers,
        window_ms=WINDOW_MS,
        settings={"session-timeout-ms": 6000, "commit-interval-ms": 100},
    ).start()
    try:
        for events in workload_events(seed=71):
            workload.produce(bootstrap, events)
            wait_until_caught_up(bootstrap, app, workload.ends)
        yield app, workload
    finally:
        app.stop()


def test_every_store_sits_behind_internal_topics(
    kafka_broker: LocalKafkaCluster, shapes: tuple[StreamsShapes, Workload]
) -> None:
    """From the app's own Topology#describe(): each store is reached from its inputs only
    through internal topics (two in a row for ``chained`` and the foreign-key join's left
    side), and Kafka created those topics with the application id as prefix."""
    app, workload = shapes
    nodes = parse_topology(app.topology)
    assert set(UPSTREAM) == set(SHAPES)
    assert set(SHAPES) <= {store for node in nodes.values() for store in node.stores}
    roles = {topic: role for role, topic in workload.inputs.items()}
    for store, expected in UPSTREAM.items():
        inputs = {roles[t]: hops for t, hops in upstream(nodes, store).items() if t in roles}
        assert inputs == expected, store
    internal = internal_topics(nodes)
    for side in ("REGISTRATION", "RESPONSE"):  # Kafka Streams' names of unnamed FK joins
        assert any(
            re.fullmatch(f"KTABLE-FK-JOIN-SUBSCRIPTION-{side}-\\d+-topic", t) for t in internal
        )
    assert {"regroup-repartition", "windowed-repartition", "hop-repartition"} <= internal
    assert "chained-repartition" in internal
    admin = clients.admin(kafka_broker.bootstrap_servers, None)
    existing = admin.list_topics(timeout=30).topics
    assert {f"{app.application_id}-{t}" for t in internal} <= set(existing)


def kafka_streams_rows(app: StreamsShapes, store: str) -> tuple[dict[Any, Any], Position]:
    """Kafka Streams' IQv2 answer for the whole store: rows by key (by key and window start
    for ``windowed``) -> (value, timestamp), and the store's position."""
    if store == "windowed":
        answer = app.query("windows", store)
        assert answer["ok"], answer
        rows = {(r["key"], r["start"]): (r["value"], r["timestamp"]) for r in answer["rows"]}
    else:
        answer = app.query("trange", store)
        assert answer["ok"], answer
        rows = {r["key"]: (r["value"], r["timestamp"]) for r in answer["rows"]}
    return rows, Position.from_dict(answer["position"])


def our_rows(replicated: dict[str, Any], store: str) -> dict[Any, Any]:
    """Our replica's rows, decoded as :func:`kafka_streams_rows` gives Kafka Streams'."""
    rows: dict[Any, Any] = {}
    for record in replicated["records"]:
        if store == "windowed":
            windowed = decode_window_key(record.key)
            key: Any = (windowed.key.decode(), windowed.window_start)
        else:
            key = record.key.decode()
        value = record.value.decode() if store == "fkjoined" else long_value(record.value)
        rows[key] = (value, record.timestamp)
    return rows


def check_workload_effect(
    bootstrap: str, app: StreamsShapes, store: str, rows: dict[Any, Any], workload: Workload
) -> None:
    """Kafka Streams' answer holds the workload's effect (so the comparison is not of two
    empty stores, nor of stores that never saw a deletion)."""
    counts = workload.order_counts()
    values = {key: value for key, (value, _) in rows.items()}
    if store in ("regroup", "chained"):
        assert values == counts
    elif store == "joined":
        assert values and set(values) <= workload.labelled and "online" not in values
        assert all(count <= counts[key] for key, count in values.items())
    elif store == "fkjoined":
        # Each row joins the shipment's current customer (the join drops responses for an
        # older one), and deleted shipments are gone. A customer's region may be stale: with
        # Kafka Streams' record cache on, a customer put and deleted within one commit
        # interval never reaches the join's right side, while a subscription may have read
        # the put (seen with 4.3.1; never with cache-max-bytes 0).
        joined = {shipment: tuple(value.split("/")) for shipment, value in values.items()}
        shipments = workload.tables["shipments"]
        assert set(joined) <= set(shipments)
        assert all(customer == shipments[s] for s, (_, customer) in joined.items())
        assert all(region in REGIONS for region, _ in joined.values())
        assert len(joined) > SHIPMENTS // 2
        changelog = settled_changelog(bootstrap, app.changelog(store))
        assert any(record.value is None for record in changelog)  # deletions were logged
    else:
        per_prefix = Counter[str]()
        for (key, _), count in values.items():
            per_prefix[key] += count
        assert len(values) > 2 * len(counts)  # several windows per prefix
        assert all(n <= counts[key] for key, n in per_prefix.items())


@pytest.mark.parametrize("store", SHAPES)
def test_replica_equals_kafka_streams_answer(
    kafka_broker: LocalKafkaCluster,
    shapes: tuple[StreamsShapes, Workload],
    store: str,
    tmp_path: Path,
) -> None:
    """Every key's (or window's) value and timestamp of our follower's replica equals Kafka
    Streams' answer; so does the position with position headers (Kafka Streams names the
    internal topic the store's sub-topology reads), and without them our replica knows none."""
    bootstrap = kafka_broker.bootstrap_servers
    app, workload = shapes
    theirs, position = kafka_streams_rows(app, store)
    check_workload_effect(bootstrap, app, store, theirs, workload)
    ours = replica(bootstrap, app, store, tmp_path / store)
    assert our_rows(ours, store) == theirs
    assert position != Position.empty()
    if app.position_headers:
        # The store's sub-topology reads internal topics: its position names them only.
        assert all(t.startswith(f"{app.application_id}-") for t in position.topics()), position
        assert ours["position"] == position
    else:
        assert ours["position"] == Position.empty()
