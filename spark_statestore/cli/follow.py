"""``spark-statestore follow``: follow a changelog into a local store, in the foreground.

Opens (creating when missing) a follower store, restores it from the changelog with a
progress line on stderr, says ``caught up`` once it has reached the end offsets the changelog
had at start, then keeps following until SIGINT/SIGTERM (or exits right away with
``until_caught_up``). Every stop is clean: the follower finishes its chunk, the store is
closed, and a later run resumes from the store's offsets.

The argument parsing lives in :mod:`spark_statestore.cli.main`; this module is imported only when
the command runs, since it needs the Kafka client.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TextIO

from spark_statestore.cli.arguments import parse_settings
from spark_statestore.cli.progress import ProgressLine, format_count, format_lag, format_rate
from spark_statestore.connectors.kafka.errors import KafkaClientError
from spark_statestore.connectors.kafka.follower.leader import KafkaLeaderProgress
from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
from spark_statestore.errors import FollowerError, OptionError, StateStoreError, TopologyError
from spark_statestore.follower import Follower, FollowerState
from spark_statestore.follower.topology import parse_topology, store_of_changelog
from spark_statestore.partition_spec import format_partitions, parse_partitions
from spark_statestore.store import Role, Store, StoreSpec

if TYPE_CHECKING:
    from spark_statestore.metrics.server import MetricsEndpoint

__all__ = ["FollowOptions", "ProgressMode", "parse_kafka_settings", "run_follow"]

ProgressMode = Literal["auto", "live", "off"]
"""``auto``: a live line on a terminal, a plain line every few seconds elsewhere; ``live``:
always the live line (``--progress``); ``off``: none (``--no-progress``)."""

_TICK_S = 0.1  # how often the foreground loop looks at the follower and the stop flag
_OFFSETS_SHOWN = 8  # partitions listed in status lines
_RESERVED_SETTINGS = {"bootstrap.servers": "--bootstrap-servers"}
# Kafka's legal topic and group names: an application.id names both (its group and the
# prefix of its changelogs).
_KAFKA_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


@dataclass(frozen=True, slots=True)
class FollowOptions:
    """What ``spark-statestore follow`` was asked to do, parsed and checked.

    Parameters
    ----------
    bootstrap_servers
        Kafka bootstrap servers.
    changelog
        The changelog topic to follow.
    path
        The store directory (created when missing).
    partitions
        The changelog partitions to follow (a subset follower), None for all.
    chunk_records
        Records per store commit; None keeps the follower's default.
    until_caught_up
        Exit (0) as soon as the store has caught up instead of following forever.
    kafka_config
        Extra Kafka consumer settings (``--kafka KEY=VALUE``).
    progress
        How to show restore progress (:data:`ProgressMode`).
    leader_application_id
        The exactly-once leader's ``application.id`` (``--leader-application-id``): the
        store's position comes from its committed consumer-group offsets (DESIGN §5), for
        changelogs without position headers. None: positions come from headers only.
    leader_topology
        The text of the leader's ``Topology.describe()`` (``--leader-topology FILE``).
    leader_upstream_topics
        The internal topics between the leader's input topics and the store
        (``--leader-upstream-topics``).
    metrics
        The endpoint serving the follower's metrics (Prometheus' text format) and its health
        (``--metrics-*`` flags); None: no endpoint.
    """

    bootstrap_servers: str
    changelog: str
    path: str
    partitions: tuple[int, ...] | None = None
    chunk_records: int | None = None
    until_caught_up: bool = False
    kafka_config: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    progress: ProgressMode = "auto"
    leader_application_id: str | None = None
    leader_topology: str | None = None
    leader_upstream_topics: tuple[str, ...] | None = None
    metrics: MetricsEndpoint | None = None

    @classmethod
    def from_cli(
        cls,
        *,
        bootstrap_servers: str,
        changelog: str,
        path: str,
        partitions: str | None = None,
        chunk_records: int | None = None,
        until_caught_up: bool = False,
        kafka: Sequence[str] = (),
        progress: bool | None = None,
        leader_application_id: str | None = None,
        leader_topology: str | None = None,
        leader_upstream_topics: str | None = None,
    ) -> FollowOptions:
        """Build the options from the command's flags.

        Parameters
        ----------
        partitions
            The ``--partitions`` text (``"0,2,5-7"``), or None for all partitions.
        kafka
            The ``--kafka KEY=VALUE`` flags.
        progress
            True for ``--progress``, False for ``--no-progress``, None for neither.
        leader_application_id
            The ``--leader-application-id`` text, or None.
        leader_topology
            The ``--leader-topology`` file, or None.
        leader_upstream_topics
            The ``--leader-upstream-topics`` text, or None.

        Raises
        ------
        OptionError
            For an empty topic, bootstrap servers or path, a bad ``--partitions`` list, a
            ``--chunk-records`` below 1, a malformed ``--kafka`` setting, or a
            ``--leader-application-id`` that is not a Kafka group id or comes with
            ``--partitions``, ``--leader-topology`` or ``--leader-upstream-topics``
            without a leader, or a topology file that cannot be read or lacks the store;
            the message names the flag.
        """
        for flag, value in (
            ("--bootstrap-servers", bootstrap_servers),
            ("--changelog", changelog),
            ("PATH", path),
        ):
            if not value.strip():
                raise OptionError(f"follow: {flag} must not be empty")
        if chunk_records is not None and chunk_records < 1:
            raise OptionError(f"option --chunk-records must be >= 1, got {chunk_records}")
        mode: ProgressMode = "auto" if progress is None else ("live" if progress else "off")
        if leader_application_id is not None:
            _check_leader(leader_application_id, partitions)
        topology = _leader_topology(leader_application_id, changelog, leader_topology)
        upstream = None
        if leader_upstream_topics is not None:
            if leader_application_id is None:
                raise OptionError("option --leader-upstream-topics needs --leader-application-id")
            upstream = tuple(t.strip() for t in leader_upstream_topics.split(",") if t.strip())
            if not upstream:
                raise OptionError(
                    "option --leader-upstream-topics is empty: name the internal topics, or "
                    "give --leader-topology for a store that reads its input topics directly"
                )
        return cls(
            bootstrap_servers=bootstrap_servers,
            changelog=changelog,
            path=path,
            partitions=None
            if partitions is None
            else parse_partitions(partitions, option="--partitions"),
            chunk_records=chunk_records,
            until_caught_up=until_caught_up,
            kafka_config=MappingProxyType(parse_kafka_settings(kafka)),
            progress=mode,
            leader_application_id=leader_application_id,
            leader_topology=topology,
            leader_upstream_topics=upstream,
        )


def _leader_topology(application_id: str | None, changelog: str, file: str | None) -> str | None:
    """The text of ``--leader-topology FILE``, checked to have the changelog's store."""
    if file is None:
        return None
    if application_id is None:
        raise OptionError("option --leader-topology needs --leader-application-id")
    try:
        text = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OptionError(f"option --leader-topology: cannot read {file}: {exc}") from exc
    try:
        parse_topology(text).upstream(store_of_changelog(application_id, changelog))
    except TopologyError as exc:
        raise OptionError(f"option --leader-topology {file}: {exc}") from exc
    return text


def _check_leader(application_id: str, partitions: str | None) -> None:
    """Refuse a leader id Kafka Streams could not have, or a leader with a partition subset
    (as the Spark source's ``leaderApplicationId`` does)."""
    if _KAFKA_NAME.fullmatch(application_id) is None or application_id in (".", ".."):
        raise OptionError(
            f"option --leader-application-id {application_id[:80]!r} is not a valid Kafka "
            "Streams application.id: use 1-249 of the characters a-z A-Z 0-9 . _ - (and not "
            "'.' or '..')"
        )
    if partitions is not None:
        raise OptionError(
            "option --leader-application-id needs a follower of every partition: the "
            "leader's committed offsets cover them all; remove --partitions"
        )


def parse_kafka_settings(pairs: Sequence[str], *, option: str = "--kafka") -> dict[str, str]:
    """Parse ``KEY=VALUE`` Kafka client settings; a later repeat of a key wins.

    Raises
    ------
    OptionError
        For an item without ``=`` or with an empty key, or a setting that has its own flag
        (``bootstrap.servers``); the message names ``option``.
    """
    return parse_settings(
        pairs,
        option=option,
        what="a Kafka consumer setting",
        example="fetch.max.bytes=33554432",
        reserved=_RESERVED_SETTINGS,
    )


def run_follow(
    options: FollowOptions,
    *,
    stderr: TextIO | None = None,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Run the follow command in the foreground; returns the exit code (0).

    Parameters
    ----------
    options
        What to follow, where, and how to report it.
    stderr
        Where progress and status lines go (``sys.stderr``).
    stop
        Set it to stop following. None installs SIGINT and SIGTERM handlers that set an
        internal flag (only possible in the main thread), restored on return.
    clock
        Monotonic seconds, for the progress line and the summary.

    Raises
    ------
    StateStoreError
        The topic does not exist or cannot be read (``KafkaClientError``), the store is
        owned by another process (``StoreLockedError``), belongs to another topic or subset
        (``StoreMismatchError``, ``StoreRoleError``), the partitions are not the topic's
        (``OptionError``), or the follower failed while following.
    """
    err = sys.stderr if stderr is None else stderr
    if stop is None:
        with _stop_on_signals() as own_stop:
            return run_follow(options, stderr=err, stop=own_stop, clock=clock)
    with _open_follower(options) as follower, _metrics(follower, options, err):
        return _follow(follower, options, stop, err, clock)


# -- the steps --------------------------------------------------------------------------------
@contextlib.contextmanager
def _metrics(follower: Follower, options: FollowOptions, err: TextIO) -> Iterator[None]:
    """The follower's metrics endpoint while it runs (``--metrics-port``)."""
    if options.metrics is None:
        yield
        return
    from prometheus_client.registry import CollectorRegistry

    from spark_statestore.metrics import FollowerMetrics, StoreMetrics

    registry = CollectorRegistry()
    FollowerMetrics(follower, registry)
    StoreMetrics(follower.store, registry)
    health = {str(follower.store.path): follower.health}
    with options.metrics.start(registry, health=health) as server:
        _say(err, f"metrics at {server.url}")
        yield


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    stop = threading.Event()

    def handler(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def _open_follower(options: FollowOptions) -> Iterator[Follower]:
    """The source, the store and the follower, closed in reverse order on the way out."""
    topic = options.changelog
    try:
        source = KafkaChangelogSource(
            options.bootstrap_servers, topic, config=dict(options.kafka_config)
        )
    except KafkaClientError as exc:
        # The only thing creating the source asks of Kafka is to accept the settings.
        raise OptionError(f"option --kafka: {exc}") from exc
    with contextlib.ExitStack() as stack:
        stack.callback(source.close)
        # Ask the topic first: a missing topic must not leave an empty store behind.
        count = source.partition_count()
        outside = [p for p in options.partitions or () if p >= count]
        if outside:
            raise OptionError(
                f"option --partitions: changelog {topic!r} has {count} partition(s) "
                f"(0-{count - 1}), no partition {format_partitions(outside)}"
            )
        spec = StoreSpec(Role.FOLLOWER, topic, count, held_partitions=options.partitions)
        store = stack.enter_context(
            Store.open(
                options.path,
                spec,
                purpose=f"spark-statestore follow {topic} (pid {os.getpid()})",
            )
        )
        kwargs: dict[str, Any] = (
            {} if options.chunk_records is None else {"chunk_records": options.chunk_records}
        )
        leader = None
        if options.leader_application_id is not None:
            leader = KafkaLeaderProgress(
                options.bootstrap_servers,
                options.leader_application_id,
                topic,
                count,
                config=dict(options.kafka_config),
                topology=options.leader_topology,
                upstream_topics=options.leader_upstream_topics,
            )
            stack.callback(leader.close)
        follower = Follower(store, source, partitions=options.partitions, leader=leader, **kwargs)
        stack.pop_all()  # from here on follower.stop() closes the source
        try:
            yield follower
        finally:
            try:
                follower.stop()
            finally:
                store.close()
                if leader is not None:
                    leader.close()


def _follow(
    follower: Follower,
    options: FollowOptions,
    stop: threading.Event,
    err: TextIO,
    clock: Callable[[], float],
) -> int:
    store, topic = follower.store, options.changelog
    started = clock()
    follower.start()  # fetches the restore targets here, so errors surface in this thread
    subset = (
        ""
        if options.partitions is None
        else f" partitions {format_partitions(follower.partitions)}"
    )
    _say(
        err,
        f"following {topic}{subset} into {store.path} from "
        f"{_offsets(store.metadata.changelog_offsets, follower.partitions)}; to restore: "
        f"{format_lag(_lags(follower))}",
    )
    progress = _progress_line(options, err, topic, clock)
    caught_up = False
    # With a leader, say once when the store first knows a position (read-your-writes
    # bounds can be checked from then on): its committed offsets, reached by the store.
    positioned = options.leader_application_id is None
    while not stop.is_set():
        _raise_if_failed(follower, options)
        if not positioned and store.metadata.position.topics():
            positioned = True
            _say(
                err,
                f"position from leader {options.leader_application_id}'s committed offsets: "
                f"{store.metadata.position.to_json()}",
            )
        if follower.state is FollowerState.RUNNING and not caught_up:
            caught_up = True
            if progress is not None:
                progress.close()
            seconds = max(clock() - started, 1e-9)
            applied = follower.records_applied
            then = "exiting (--until-caught-up)" if options.until_caught_up else "following"
            _say(
                err,
                f"caught up: {format_count(applied)} records applied in {seconds:.1f} s "
                f"({format_rate(applied / seconds)} records/s); store {store.path} is at "
                f"{_offsets(store.metadata.changelog_offsets, follower.partitions)}; "
                f"{then}" + ("" if options.until_caught_up else " until SIGINT/SIGTERM"),
            )
            if options.until_caught_up:
                break
        elif not caught_up and progress is not None:
            progress.update(follower.records_applied, _lags(follower))
        stop.wait(_TICK_S)
    else:
        if progress is not None:
            progress.close()
        _say(err, "stop requested: finishing the chunk in progress")
    follower.stop()
    _raise_if_failed(follower, options)
    _say(
        err,
        f"stopped: {format_count(follower.records_applied)} records applied by this run; "
        f"store {store.path} is at "
        f"{_offsets(store.metadata.changelog_offsets, follower.partitions)}",
    )
    return 0


# -- helpers ----------------------------------------------------------------------------------
def _progress_line(
    options: FollowOptions, err: TextIO, topic: str, clock: Callable[[], float]
) -> ProgressLine | None:
    if options.progress == "off":
        return None
    live = options.progress == "live" or _isatty(err)
    return ProgressLine(err, topic, live=live, clock=clock)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or exotic stream
        return False


def _raise_if_failed(follower: Follower, options: FollowOptions) -> None:
    error = follower.error
    if error is None:
        return
    if isinstance(error, StateStoreError):
        raise error
    raise FollowerError(
        f"following {options.changelog!r} into {follower.store.path} failed: "
        f"{type(error).__name__}: {error}; the store keeps what was committed, run the "
        "command again to resume"
    ) from error


def _lags(follower: Follower) -> dict[int, int]:
    return {p: lag.offset_lag for p, lag in follower.lags().items()}


def _offsets(offsets: Mapping[int, int], partitions: Sequence[int]) -> str:
    shown = [f"{p}: {offsets.get(p, 0)}" for p in partitions[:_OFFSETS_SHOWN]]
    if len(partitions) > _OFFSETS_SHOWN:
        shown.append(f"+{len(partitions) - _OFFSETS_SHOWN} more")
    return "offsets {" + ", ".join(shown) + "}"


def _say(err: TextIO, line: str) -> None:
    err.write(line + "\n")
    err.flush()
