"""The repository's Kafka Streams application as a child JVM: the peer of the interop tests.

``interop/kafka-streams`` (Java 17, Maven, ``org.apache.kafka:kafka-streams`` at
:data:`~spark_statestore.connectors.kafka.local.jars.KAFKA_VERSION`) is built by the setup
into ``interop/kafka-streams/target/``; ``$SPARK_STATESTORE_STREAMS_VERSION`` runs a build
against another Kafka Streams (:mod:`~spark_statestore.connectors.kafka.local.streams_build`,
``make compat``). It reads an orders topic and keeps one store of each
kind (``totals`` key-value, ``latest`` timestamped, ``versions`` versioned, ``counts``
window, ``sessions`` session), exactly-once v2, with or without position headers, and
answers Kafka Streams' own IQv2 queries on stdin. :class:`StreamsApp` starts it, waits for
RUNNING and asks it queries; see the Java sources for the query lines and answers.

The same jar holds a second main class, ``FollowerApp``: the other direction, Kafka Streams
following changelogs that spark-statestore's sink writes, with read-only state stores
(``Topology#addReadOnlyStateStore``, KIP-813) or global tables
(``StreamsBuilder#globalTable``). :class:`StreamsFollower` starts it and asks its
queries, including IQv2 range queries bounded by a :class:`~spark_statestore.position.Position`.

A third, ``ShapesApp``, runs topologies of several sub-topologies (repartitions, joins, a
foreign-key join): see :mod:`~spark_statestore.connectors.kafka.local.shapes_app`. Every main
class prints its ``Topology#describe()`` first (:attr:`StreamsApp.topology`).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from spark_statestore.connectors.kafka.errors import StreamsAppError
from spark_statestore.connectors.kafka.local.cluster import find_java
from spark_statestore.connectors.kafka.local.streams_build import (
    ENV_APP,
    ENV_STREAMS_VERSION,
    app_classpath,
    has_headers_stores,
    interop_app_dir,
    streams_version,
)
from spark_statestore.position import Position

__all__ = [
    "ENV_APP",
    "ENV_STREAMS_VERSION",
    "HEADERS_APP",
    "REGISTRY_APP",
    "STORES",
    "StreamsApp",
    "StreamsFollower",
    "has_headers_stores",
    "interop_app_dir",
    "streams_version",
]

STORES = ("totals", "latest", "versions", "counts", "sessions")
"""The app's state stores; each logs to ``<application id>-<store>-changelog``."""
INTEROP_APP = "io.sparkstatestore.interop.InteropApp"
"""The main class of the orders app (the default of :class:`StreamsApp`)."""
FOLLOWER_APP = "io.sparkstatestore.interop.FollowerApp"
"""The main class of the app that follows our sink's changelogs (:class:`StreamsFollower`)."""
HEADERS_APP = "io.sparkstatestore.interop.HeadersApp"
"""The app's header-aware variant (``main_class``): ``headed``, a Kafka Streams 4.3
``TimestampedKeyValueStoreWithHeaders`` of each customer's last order with the order's
headers, and ``headed-windows``, a ``TimestampedWindowStoreWithHeaders`` of the last order
per window (``window-ms``); its queries ``headers`` and ``window-headers`` answer every entry
with value, timestamp and headers (and window start and end)."""
REGISTRY_APP = "io.sparkstatestore.interop.RegistryApp"
"""The app's schema-registry variant (``main_class``): ``orders-avro``, a key-value store of
each customer's orders as an Avro ``CustomerOrders`` record, and ``avro-keyed``, keyed by an
Avro ``CustomerKey`` record (customer, amount modulo 4) with Long sums; both serialized by
Apicurio Registry's Avro serde in the Confluent frame (magic byte, 4-byte schema id),
registering their schemas as ``<application id>-<store>-changelog-value`` / ``-key``; and
``orders-proto``, the same fold as a Protobuf ``sparkstatestore.interop.CustomerOrders``
message (well-known Timestamp, Duration and StringValue, a map, an enum, a nested message, a
proto3 ``optional`` and a oneof) through Apicurio's Protobuf serde (the frame with message
indexes), its schema registered as the ``.proto`` source. Its
``settings``: ``schema-registry-url``, Apicurio Registry's own API
(``<LocalSchemaRegistry.base_url>/apis/registry/v3``; required), and ``schema-version``
(``1``, or ``2``: ``note`` dropped, ``region`` added with a default). Its query ``records``
answers every entry, Avro keys and values as JSON objects of their fields (timestamps in
epoch milliseconds, decimals as strings, enums as symbols)."""


class StreamsApp:
    """The interop Kafka Streams application in a child JVM.

    Parameters
    ----------
    bootstrap_servers
        The Kafka cluster.
    state_dir
        Kafka Streams' state directory (its RocksDB stores).
    application_id
        The app's ``application.id``: its consumer group and the prefix of its changelogs.
    input_topic
        The orders topic (it must exist); None passes no ``--input-topic`` (for a main class
        that takes none).
    position_headers
        Turn on Kafka Streams' internal consistency option (``v``/``c`` headers).
    settings
        Other ``--name value`` options of the app (``commit-interval-ms``,
        ``history-retention-ms``, ``window-ms``, ``session-gap-ms``).
    log_path
        Where the JVM's stderr goes (Kafka Streams' warnings and errors).
    main_class
        The Java main class to run: :data:`INTEROP_APP` (the orders app),
        :data:`FOLLOWER_APP` (see :class:`StreamsFollower`), :data:`HEADERS_APP`,
        :data:`REGISTRY_APP`, or ``SHAPES_APP`` (see
        :class:`~spark_statestore.connectors.kafka.local.shapes_app.StreamsShapes`).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        state_dir: Path,
        *,
        application_id: str = "interop-orders",
        input_topic: str | None = "orders",
        position_headers: bool = True,
        settings: Mapping[str, Any] | None = None,
        log_path: Path | None = None,
        main_class: str = INTEROP_APP,
    ) -> None:
        self.application_id = application_id
        self.position_headers = position_headers
        self.log_path = log_path or state_dir.with_name(f"{state_dir.name}.log")
        args = {
            "bootstrap-servers": bootstrap_servers,
            "state-dir": str(state_dir),
            "application-id": application_id,
            **({"input-topic": input_topic} if input_topic is not None else {}),
            "position-headers": "true" if position_headers else "false",
            **{name: str(value) for name, value in (settings or {}).items()},
        }
        classpath = app_classpath()
        self._command: list[str] = [str(find_java()), "-Xmx512m", "-cp", classpath, main_class]
        for name, value in args.items():
            self._command += [f"--{name}", value]
        self._proc: subprocess.Popen[str] | None = None
        self._answers: dict[str, dict[str, Any]] = {}
        self._states: queue.Queue[str] = queue.Queue()
        self._errors: list[str] = []
        self._dumped = threading.Event()
        self._events: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self._ids = 0

    def changelog(self, store: str) -> str:
        """The changelog topic of ``store``: ``<application id>-<store>-changelog``."""
        return f"{self.application_id}-{store}-changelog"

    @property
    def command(self) -> list[str]:
        """The JVM's command line: java, its options, the main class and its ``--name value``
        options."""
        return list(self._command)

    @property
    def topology(self) -> str:
        """The app's ``Topology#describe()`` text, as Kafka Streams prints it (internal topics
        are named without the ``<application id>-`` prefix Kafka gives them).

        Raises
        ------
        StreamsAppError
            The app has not printed it (it was not started).
        """
        with self._changed:
            texts = [e["text"] for e in self._events if e.get("event") == "topology"]
        if not texts:
            raise StreamsAppError(
                f"the Kafka Streams app {self.application_id!r} has not described its topology "
                "(start it first)"
            )
        return str(texts[-1])

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> StreamsApp:
        """Start the JVM and return once Kafka Streams is RUNNING.

        Raises
        ------
        StreamsAppError
            It failed, exited, or did not reach RUNNING within ``timeout_s``.
        """
        with self.log_path.open("a") as log:
            self._proc = subprocess.Popen(
                self._command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        assert self._proc.stdout is not None
        out = (self._proc.stdout, self.log_path.open("a"))  # its stdout's other lines: the log
        threading.Thread(target=self._read, args=out, name="streams-app-out", daemon=True).start()
        try:
            self.wait_for_state("RUNNING", timeout_s)
        except BaseException:
            self.kill()  # a JVM that never ran is not left behind
            raise
        return self

    def wait_for_state(self, wanted: str, timeout_s: float) -> None:
        """Return once the app reports ``wanted`` (a ``KafkaStreams.State`` name)."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                state = self._states.get(timeout=max(0.0, remaining))
            except queue.Empty:
                raise StreamsAppError(
                    f"the Kafka Streams app {self.application_id!r} did not reach {wanted} "
                    f"within {timeout_s:.0f} s; see {self.log_path}"
                ) from None
            if state == wanted:
                return
            if state in ("ERROR", "EXITED"):
                raise StreamsAppError(
                    f"the Kafka Streams app {self.application_id!r} stopped ({state}) before "
                    f"reaching {wanted}: {'; '.join(self._errors) or 'no error reported'}; "
                    f"see {self.log_path}"
                )

    def stop(self, timeout_s: float = 60.0) -> None:
        """Close Kafka Streams cleanly (it commits and writes its checkpoints), then wait for
        the JVM to exit."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write("stop\n")
            proc.stdin.flush()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """SIGKILL the JVM (an unclean stop: Kafka Streams aborts its open transaction on the
        next start, or the coordinator does after its timeout)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> StreamsApp:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- IQv2 -----------------------------------------------------------------------------
    def query(
        self,
        op: str,
        store: str,
        key: str | None = None,
        timeout_s: float = 30.0,
        *,
        args: Sequence[object] = (),
    ) -> dict[str, Any]:
        """Ask Kafka Streams an IQv2 query; returns its answer (``ok``, ``rows``,
        ``position``, or ``failure`` and ``message``).

        ``op`` is ``key`` / ``tkey`` (``KeyQuery`` / ``TimestampedKeyQuery`` of ``key``),
        ``range`` / ``trange`` (the whole store), ``wkey`` (``WindowKeyQuery``; ``args``:
        the window start range), ``vkey`` (``VersionedKeyQuery``; ``args``: an optional
        as-of time) or ``mvkey`` (``MultiVersionedKeyQuery``; ``args``: from, to, ``asc`` or
        ``desc``); see ``Queries.java`` for the rest.

        Raises
        ------
        StreamsAppError
            The app is not running or did not answer within ``timeout_s``.
        """
        words = [str(arg) for arg in args]
        for word in [key, *words] if key is not None else words:
            if not word or any(c.isspace() for c in word):
                raise StreamsAppError(
                    f"the app's query lines take keys and arguments without spaces, got {word!r}"
                )
        proc = self._proc
        if proc is None or proc.poll() is not None or proc.stdin is None:
            raise StreamsAppError(f"the Kafka Streams app {self.application_id!r} is not running")
        with self._changed:
            self._ids += 1
            request_id = str(self._ids)
        proc.stdin.write(" ".join([request_id, op, store, *([key] if key else []), *words]) + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while request_id not in self._answers:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or proc.poll() is not None:
                    raise StreamsAppError(
                        f"the Kafka Streams app {self.application_id!r} did not answer "
                        f"{op} {store} within {timeout_s:.0f} s; see {self.log_path}"
                    )
                self._changed.wait(remaining)
            return self._answers.pop(request_id)

    # -- its output -----------------------------------------------------------------------
    def events(self) -> list[dict[str, Any]]:
        """The app's event lines so far, in order (``starting``, ``state``,
        ``restore-start``, ``restore-end``, ...), each with ``at``: the JVM's clock in epoch
        milliseconds."""
        with self._changed:
            return list(self._events)

    def describe(self) -> str:
        """What the app has said so far (states, uncaught errors, log), for a failure message."""
        with self._changed:
            states = [str(e.get("state")) for e in self._events if e.get("event") == "state"]
        errors = "; ".join(self._errors) or "none"
        return (
            f"the Kafka Streams app {self.application_id!r} (states {' -> '.join(states)}; "
            f"errors: {errors}; log {self.log_path})"
        )

    def dump_threads(self, timeout_s: float = 10.0) -> bool:
        """Have the JVM print its threads' stacks (SIGQUIT) into the app's log (where a stuck
        app waits); True once it is there, False if the app is not running or it is late."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return False
        self._dumped.clear()
        try:
            os.kill(proc.pid, signal.SIGQUIT)
        except ProcessLookupError:
            return False
        return self._dumped.wait(timeout_s)

    def _read(self, stdout: IO[str], log: IO[str]) -> None:
        for line in stdout:
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                # Not ours: a JVM warning, or a thread dump (dump_threads): into the log.
                with contextlib.suppress(OSError):
                    log.write(line)
                    log.flush()
                if line.startswith("JNI global refs"):  # the last line of a HotSpot dump
                    self._dumped.set()
                continue
            if "event" in message:
                with self._changed:
                    self._events.append(message)
            if message.get("event") == "state":
                self._states.put(str(message["state"]))
            elif message.get("event") == "error":
                self._errors.append(str(message.get("message")))
            elif "id" in message:
                with self._changed:
                    self._answers[str(message["id"])] = message
                    self._changed.notify_all()
        log.close()
        self._states.put("EXITED")
        with self._changed:
            self._changed.notify_all()


class StreamsFollower(StreamsApp):
    """Kafka Streams following changelogs that spark-statestore's sink writes
    (``FollowerApp``, in the same jar as the orders app).

    Parameters
    ----------
    bootstrap_servers
        The Kafka cluster.
    state_dir
        Kafka Streams' state directory.
    follow
        ``{store name: (topic, value format)}``: each store follows its topic; keys are UTF-8
        strings, values ``"string"`` (``Serdes.String()``), ``"long"`` (``Serdes.Long()``,
        8 bytes big-endian) or ``"avro"`` (Avro records in the registry serializers' frame,
        read by Apicurio Registry's Avro serde, which looks the frame's id up as a content id,
        the id Apicurio's Confluent-compatible API gives out: each record answers the fields
        of its own writer schema, as a JSON object) or ``"protobuf"`` (Protobuf messages in
        the Confluent frame with message indexes, read by Apicurio Registry's Protobuf serde
        as ``DynamicMessage`` with the writer's schema, the message type the indexes name;
        each value answers as a JSON object keyed by proto field names: every field of the
        writer's message, Timestamp and Duration as microseconds, wrappers as their value,
        unset ``optional``, message and oneof fields as null, enums by name, bytes as
        base64, maps as objects). A null value deletes the key.
    kind
        ``"readonly"``: ``Topology#addReadOnlyStateStore`` (KIP-813; the topic is the store's
        changelog, Kafka Streams creates none), queried with IQv2. ``"global"``:
        ``StreamsBuilder#globalTable``, which Kafka Streams 4.3 serves through IQv1 only (its
        IQv2 answers ``UNKNOWN_QUERY_TYPE`` for global stores, KAFKA-13523).
    application_id
        Its ``application.id`` (consumer group; nothing is named after it).
    position_headers
        Kafka Streams' internal consistency option: with it, a store *restored* from the topic
        merges the records' ``c`` headers into its position.
    log_path
        Where the JVM's stderr goes.
    schema_registry_url
        For ``"avro"`` and ``"protobuf"`` stores: Apicurio Registry's own API,
        ``<LocalSchemaRegistry.base_url>/apis/registry/v3``.

    Its queries are :meth:`range` and :meth:`all`; the orders app's ops of :meth:`query` are
    answered with an ``EXCEPTION`` failure (unknown op).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        state_dir: Path,
        *,
        follow: Mapping[str, tuple[str, str]],
        kind: str,
        application_id: str = "interop-follower",
        position_headers: bool = False,
        log_path: Path | None = None,
        schema_registry_url: str | None = None,
    ) -> None:
        if kind not in ("readonly", "global"):
            raise StreamsAppError(f"kind must be 'readonly' or 'global', got {kind!r}")
        for store, (topic, value_format) in follow.items():
            if value_format not in ("string", "long", "avro", "protobuf"):
                raise StreamsAppError(
                    f"store {store!r} (topic {topic!r}): value format must be 'string', "
                    f"'long', 'avro' or 'protobuf', got {value_format!r}"
                )
            if value_format in ("avro", "protobuf") and schema_registry_url is None:
                raise StreamsAppError(
                    f"store {store!r} reads {value_format}: give schema_registry_url"
                )
        self.kind = kind
        self.follow = dict(follow)
        super().__init__(
            bootstrap_servers,
            state_dir,
            application_id=application_id,
            input_topic=None,
            position_headers=position_headers,
            settings={
                "kind": kind,
                "follow": ",".join(f"{s}={t}:{f}" for s, (t, f) in follow.items()),
                **(
                    {}
                    if schema_registry_url is None
                    else {"schema-registry-url": schema_registry_url}
                ),
            },
            log_path=log_path,
            main_class=FOLLOWER_APP,
        )

    def changelog(self, store: str) -> str:
        """The topic ``store`` follows (Kafka Streams creates no changelog of its own for a
        read-only store or a global table: the followed topic is one)."""
        return self.follow[store][0]

    def range(
        self,
        store: str,
        bound: Position | None = None,
        wait_s: float = 0.0,
        timeout_s: float = 60.0,
    ) -> dict[str, Any]:
        """IQv2 ``RangeQuery.withNoBounds()`` over every partition of ``store``, with
        ``PositionBound.at(bound)`` when a bound is given; Kafka Streams is asked again while a
        partition answers ``NOT_UP_TO_BOUND``, for up to ``wait_s``.

        Returns the answer: ``ok``, ``rows`` (``partition``, ``key``, ``value``), ``position``,
        ``partitions`` (those that answered) and ``attempts``; or ``ok`` false with
        ``failure`` (a ``FailureReason`` name), ``partition``, ``message`` and ``position``.
        """
        args = [str(int(wait_s * 1000))]
        if bound is not None and not bound.is_empty():
            args.append(
                ",".join(
                    f"{topic}:{partition}:{offset}"
                    for topic, partitions in sorted(bound.to_map().items())
                    for partition, offset in sorted(partitions.items())
                )
            )
        return self.query("range", store, timeout_s=timeout_s + wait_s, args=args)

    def all(self, store: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """IQv1 ``KafkaStreams#store(...).all()`` of a key-value store (a global table's
        way to be read); the answer's ``position`` is None (IQv1 has none)."""
        return self.query("all", store, timeout_s=timeout_s)
