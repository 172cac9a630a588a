"""An app of every Kafka Streams shape, followed and measured: the ``streams`` suite's
read-your-writes rows.

:class:`ShapesRun` runs the interop jar's ``ShapesApp`` (exactly-once v2, every shape: a
``groupBy`` to a new key, a stream-table join after a key change, a foreign-key join, a
windowed count after a ``groupBy``, two repartitions in a row) on input topics of its own,
and follows each store with the Spark follower source's driver runtime (``FollowerRuntime``,
``leaderApplicationId``, with or without ``leaderTopology``). :class:`ChangelogWatcher` is
the floor: a bare read_committed consumer of a store's changelog, which sees the probe's
effect before any replica can.

:func:`measure_read_your_writes` times, per shape and per mode (without the topology: every
internal topic of the app waited through; with it: the store's own), a probe's delivery to
``connect().query`` answering under the probe's offset as bound, beside the same probe's
delivery to its effect's arrival in the changelog.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.latency import distribution, percentile, shown
from spark_statestore.bench.measure import Measurement
from spark_statestore.bench.read_your_writes import (
    WINDOW_MS,
    BackgroundLoad,
    Probe,
    ShapeProbes,
    ask_client,
)
from spark_statestore.position import Position

__all__ = ["ChangelogWatcher", "ShapesRun", "measure_read_your_writes"]


STORE_TYPES = {"windowed": "window"}
"""The follower source's ``storeType`` of the shapes that are not key-value stores."""
SHAPES_PARTITIONS = 4
COMMIT_INTERVAL_MS = 100


class ShapesRun:
    """An app of every shape (``ShapesApp``, exactly-once v2) on input topics of its own, a
    producer of probes, and the stores' followers (the Spark follower source's driver
    runtime, ``FollowerRuntime``, with ``leaderApplicationId``).

    Parameters
    ----------
    bootstrap_servers
        The Kafka cluster.
    root
        A directory for the app's state, the stores and the shared token file.
    name
        The app's ``application.id`` and its topics' prefix.
    headers
        Position headers on in the app.
    narrowed
        Give the followers the app's ``Topology.describe()`` (``leaderTopology``).
    announce
        Announce the followers on their changelogs' replicas topics (for a router).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        root: Path,
        name: str,
        *,
        headers: bool,
        narrowed: bool,
        announce: bool = True,
    ) -> None:
        from confluent_kafka import Producer

        from spark_statestore.connectors.kafka import clients
        from spark_statestore.connectors.kafka.local.shapes_app import (
            SHAPES_INPUTS,
            StreamsShapes,
        )

        self.bootstrap = bootstrap_servers
        self.name = name
        self.headers = headers
        self.narrowed = narrowed
        self.announce = announce
        self.inputs = {role: f"{name}-{role}" for role in SHAPES_INPUTS}
        for topic in self.inputs.values():
            clients.ensure_topic(
                bootstrap_servers,
                None,
                topic,
                partitions=SHAPES_PARTITIONS,
                topic_config={},
                timeout_s=30,
            )
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.token_file = root / "token"
        self.token_file.write_text(f"{name}-read-your-writes-token")
        # Kafka Streams routes by Java's murmur2: tables must be co-partitioned with it.
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap_servers,
                "enable.idempotence": True,
                "partitioner": "murmur2_random",
                "linger.ms": 0,
            }
        )
        self.app = StreamsShapes(
            bootstrap_servers,
            root / "state",
            inputs=self.inputs,
            application_id=name,
            position_headers=headers,
            window_ms=WINDOW_MS,
            settings={"session-timeout-ms": 6000, "commit-interval-ms": COMMIT_INTERVAL_MS},
            log_path=root / "app.log",
        ).start()
        self.runtimes: dict[str, Any] = {}

    def follow(self, shape: str) -> Any:
        """The Spark follower source's driver runtime of ``shape``'s store (started)."""
        from spark_statestore.connectors.spark.follower.runtime import FollowerRuntime
        from spark_statestore.connectors.spark.options import parse_source_options

        options = {
            "path": str(self.root / shape),
            "kafka.bootstrap.servers": self.bootstrap,
            "changelog": self.app.changelog(shape),
            "leaderapplicationid": self.name,
            "servetokenfile": str(self.token_file),
            "announce": "true" if self.announce else "false",
        }
        if shape in STORE_TYPES:
            options["storetype"] = STORE_TYPES[shape]
        if self.narrowed:
            options["leadertopology"] = self.app.topology
        runtime = FollowerRuntime(parse_source_options(options))
        self.runtimes[shape] = runtime
        return runtime

    def produce(
        self, role: str, key: bytes, value: bytes | None, timestamp: int | None = None
    ) -> Any:
        """Write one record and wait for its delivery; returns the delivered message."""
        delivered: list[Any] = []
        failed: list[Any] = []

        def report(error: Any, message: Any) -> None:
            (failed if error is not None else delivered).append(error or message)

        kwargs: dict[str, Any] = {"timestamp": timestamp} if timestamp is not None else {}
        self.producer.produce(self.inputs[role], key=key, value=value, on_delivery=report, **kwargs)
        self.producer.flush(30)
        if failed or not delivered:
            raise RuntimeError(f"producing to {self.inputs[role]} failed: {failed}")
        return delivered[0]

    def produce_probe(self, probe: Probe) -> tuple[str, int, int]:
        """Write ``probe``; ``(topic, partition, offset)`` of it."""
        message = self.produce(probe.role, probe.key, probe.value, probe.timestamp)
        return message.topic(), message.partition(), message.offset()

    def set_up(self, probes: ShapeProbes, timeout_s: float = 120.0) -> None:
        """Produce the shape's setup records and wait until the app's group has committed
        them (its tables hold them before the first probe)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        from spark_statestore.connectors.kafka import clients

        admin = clients.admin(self.bootstrap, None)
        for role, key, value in probes.setup():
            message = self.produce(role, key, value)
            tp = TopicPartition(message.topic(), message.partition())
            request = ConsumerGroupTopicPartitions(self.name, [tp])
            deadline = time.monotonic() + timeout_s
            pause = threading.Event()  # never set: a bounded pause between reads
            while True:
                result = admin.list_consumer_group_offsets([request])[self.name].result()
                offsets = [t.offset for t in result.topic_partitions if t.error is None]
                if offsets and offsets[0] > message.offset():
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the app {self.name} did not commit {tp} past its setup record "
                        f"within {timeout_s:.0f} s; see {self.root / 'app.log'}"
                    )
                pause.wait(0.05)

    def background(self, per_second: float = 400.0) -> BackgroundLoad:
        """Background load on this app's inputs (other keys than the probes')."""
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "partitioner": "murmur2_random", "linger.ms": 5}
        )

        def produce(role: str, key: bytes, value: bytes | None) -> None:
            producer.produce(self.inputs[role], key=key, value=value)
            producer.poll(0)

        return BackgroundLoad(produce, lambda: producer.flush(30), per_second=per_second)

    def close(self) -> None:
        """Stop the followers and the app."""
        for runtime in self.runtimes.values():
            runtime.close()
        self.producer.flush(30)
        self.app.stop()


class ChangelogWatcher:
    """A bare read_committed consumer of a changelog from its end, noting when each record
    arrives: the floor of read-your-writes (no replica can answer before its record is
    readable). A thread until :meth:`close`."""

    def __init__(self, bootstrap_servers: str, changelog: str, partitions: int) -> None:
        from confluent_kafka import TopicPartition

        from spark_statestore.connectors.kafka import clients

        self._consumer = clients.consumer(
            bootstrap_servers, None, group="spark-statestore-bench-floor", what=changelog
        )
        starts = [
            TopicPartition(changelog, p, clients.watermarks(self._consumer, changelog, p, 30)[1])
            for p in range(partitions)
        ]
        self._consumer.assign(starts)
        self._arrived: list[tuple[float, bytes, bytes | None]] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="changelog-floor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.consume(500, timeout=0.05):
                key = message.key()
                if message.error() is None and key is not None:
                    with self._changed:
                        self._arrived.append((time.perf_counter(), key, message.value()))
                        self._changed.notify_all()

    def arrival(self, match: Callable[[bytes, bytes | None], bool], timeout_s: float) -> float:
        """When (``perf_counter``) the first record ``match`` accepts arrived."""

        def found() -> float | None:
            return next((t for t, k, v in self._arrived if match(k, v)), None)

        with self._changed:
            if not self._changed.wait_for(lambda: found() is not None, timeout_s):
                raise RuntimeError(f"no changelog record matched within {timeout_s:.0f} s")
            at = found()
            assert at is not None
            return at

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def measure_read_your_writes(
    bootstrap_servers: str, root: Path, trials: int, suite: str
) -> list[Measurement]:
    """Per shape and mode, ``trials`` probes under background load, each read through
    ``connect().query`` bounded by its offset and watched for in the changelog.

    Raises
    ------
    BenchError
        A bounded read answered without the probe's effect (a wrong answer), refused it, or
        its effect never reached the changelog.
    """
    import spark_statestore
    from spark_statestore.connectors.kafka.local.shapes_app import SHAPES

    measurements = []
    for narrowed in (False, True):
        mode = "leaderTopology" if narrowed else "no topology"
        name = f"bench-ryw-{'t' if narrowed else 'n'}"
        run = ShapesRun(
            bootstrap_servers, root / name, name, headers=False, narrowed=narrowed, announce=False
        )
        try:
            for shape in SHAPES:
                runtime = run.follow(shape)
                probes = ShapeProbes(shape, f"b{shape[:3]}")
                run.set_up(probes)
                watcher = ChangelogWatcher(
                    bootstrap_servers, run.app.changelog(shape), SHAPES_PARTITIONS
                )
                answered: list[float] = []
                floor: list[float] = []
                try:
                    with (
                        run.background(),
                        spark_statestore.connect(str(run.root / shape)) as client,
                    ):
                        ask = ask_client(client, probes, runtime.store.name, 60.0)
                        for _ in range(trials):
                            probe = probes.next()
                            started = time.perf_counter()
                            topic, partition, offset = run.produce_probe(probe)
                            bound = Position.from_map({topic: {partition: offset}})
                            answer = ask(probe, bound)
                            done = time.perf_counter()
                            if isinstance(answer, str) or not probes.holds(probe, answer):
                                raise BenchError(
                                    f"bench suite {suite}: {shape} ({mode}) answered "
                                    f"{answer!r} under the bound {bound.to_json()} without "
                                    "the probe's effect"
                                )
                            arrived = watcher.arrival(partial(probes.in_changelog, probe), 60.0)
                            answered.append((done - started) * 1000)
                            floor.append((arrived - started) * 1000)
                finally:
                    watcher.close()
                    runtime.close()
                    del run.runtimes[shape]
                measurements.append(_measurement(suite, shape, mode, answered, floor))
        finally:
            run.close()
    return measurements


def _measurement(
    suite: str, shape: str, mode: str, answered: list[float], floor: list[float]
) -> Measurement:
    ours, raw = distribution(answered), distribution(floor)
    our_p50, raw_p50 = percentile(answered, 0.5), percentile(floor, 0.5)
    return Measurement(
        suite=suite,
        name=f"read_your_writes_{shape}{'_topology' if mode == 'leaderTopology' else ''}",
        unit="reads/s (1000 / p50 ms)",
        candidate=f"probe delivered to connect().query answering under its offset as bound "
        f"({mode}): {shown(ours)}",
        baseline=f"probe delivered to its effect read read_committed from the changelog (the "
        f"floor): {shown(raw)}",
        candidate_rates=(1000 / our_p50,),
        baseline_rates=(1000 / raw_p50,),
        target=None,
        parameters={
            "shape": shape,
            "mode": mode,
            "trials": len(answered),
            "stale": 0,
            "kafka_streams_commit_interval_ms": COMMIT_INTERVAL_MS,
            "background_records_per_s": 400,
            "p50_over_floor": round(our_p50 / raw_p50, 3),
            "percentiles": "nearest rank",
            **{f"candidate_{k}": v for k, v in ours.items()},
            **{f"floor_{k}": v for k, v in raw.items()},
            "rounds": 1,
        },
    )
