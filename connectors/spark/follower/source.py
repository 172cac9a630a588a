"""The follower source: ``spark.readStream.format("spark_statestore")``.

Offsets are Spark-Kafka style JSON, ``{"<changelog>": {"0": 12, "1": 40}}``: per partition,
the next offset of the change feed. The driver-side reader (one long-lived Python process
per query) starts a :class:`FollowerRuntime` on its first call; every batch's end offsets
are capped by what the store has committed, so every change a micro-batch delivers is
already visible in the store. Executors read their offset ranges from Kafka directly and
yield Arrow record batches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from spark_statestore import native
from spark_statestore.connectors.spark.errors import SparkSourceError
from spark_statestore.connectors.spark.options import EARLIEST, LATEST, SourceOptions
from spark_statestore.connectors.spark.windows import WINDOWED
from spark_statestore.connectors.spark.worker_gc import freeze_long_lived
from spark_statestore.errors import StateStoreError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from spark_statestore.connectors.spark.follower.runtime import FollowerRuntime

__all__ = ["ChangelogRange", "FollowerStreamReader", "rate_limit"]

_log = logging.getLogger(__name__)

MAX_OFFSETS_PER_TASK = 500_000
"""Longer partition ranges are split into several tasks."""

AVAILABLE_NOW_WAIT_S = 600.0
"""How long Trigger.AvailableNow waits for the follower to make progress towards its target."""


class ChangelogRange(InputPartition):
    """One task: offsets ``[start, end)`` of one changelog partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end


def rate_limit(start: Mapping[int, int], end: Mapping[int, int], limit: int) -> dict[int, int]:
    """Cap ``end`` so that at most ``limit`` offsets are admitted, prorated by backlog.

    Like Spark's Kafka source: each partition gets its share of ``limit`` proportional to
    its backlog; the rounding remainder goes to the largest backlogs, so a batch always
    makes progress when there is any backlog and ``limit >= 1``.
    """
    backlog = {p: max(0, end[p] - start[p]) for p in end}
    total = sum(backlog.values())
    if total <= limit:
        return dict(end)
    shares = {p: size * limit // total for p, size in backlog.items()}
    remainder = limit - sum(shares.values())
    for p in sorted(backlog, key=lambda q: (-(backlog[q] - shares[q]), q)):
        if remainder <= 0:
            break
        if shares[p] < backlog[p]:
            shares[p] += 1
            remainder -= 1
    return {p: start[p] + shares[p] for p in end}


STOP_ON_SIGTERM_S = 20.0
"""How long a SIGTERM'd reader process may take to stop its runtime before it exits anyway."""


def _stop_on_sigterm(reader: FollowerStreamReader) -> None:
    """Stop ``reader``'s runtime cleanly when this process gets SIGTERM, then exit.

    Spark stops a query's stream reader process by destroying it (SIGTERM) rather than
    letting it return, so without this the runtime never closes: the replica's announcement
    is not withdrawn (readers keep routing to it until its TTL), the store not closed
    cleanly. The handler only starts a thread that stops the runtime and exits, so nothing
    runs re-entrantly on the main thread, which may be inside the runtime. Installed only
    in the main thread of a process whose SIGTERM has its default action (a Spark worker,
    not an application with its own handler).
    """
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def shutdown() -> None:
        try:
            reader.stop()
        except StateStoreError as exc:  # expected (Kafka gone, ...): one line, exiting anyway
            _log.warning("stopping the follower of %s on SIGTERM: %s", reader.changelog, exc)
        except BaseException:  # exiting anyway: say why the stop was not clean
            _log.exception("stopping the follower of %s on SIGTERM failed", reader.changelog)
        finally:
            os._exit(128 + signal.SIGTERM)

    def on_term(_signum: int, _frame: object) -> None:
        _log.info("SIGTERM: stopping the follower of %s", reader.changelog)
        threading.Thread(target=shutdown, name="stop-on-sigterm", daemon=True).start()
        timer = threading.Timer(STOP_ON_SIGTERM_S, os._exit, (128 + signal.SIGTERM,))
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, on_term)


class FollowerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The change feed of a changelog, with the store materialized as it goes.

    Holds only the parsed options and the schema (it is pickled to executors); the
    follower, store and Flight server are created on the first driver-side call.
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema
        self._runtime: FollowerRuntime | None = None
        self._target: dict[int, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_runtime"] = None  # the driver's live resources never travel
        return state

    @property
    def changelog(self) -> str:
        """The followed changelog topic."""
        return self._options.changelog

    # -- driver side ------------------------------------------------------------------------
    def _rt(self) -> FollowerRuntime:
        if self._runtime is None:
            from spark_statestore.connectors.spark.follower.runtime import FollowerRuntime

            self._runtime = FollowerRuntime(self._options)
            _stop_on_sigterm(self)
        self._runtime.check()
        return self._runtime

    def _format(self, offsets: Mapping[int, int]) -> dict[str, Any]:
        return {self._options.changelog: {str(p): o for p, o in sorted(offsets.items())}}

    def _parse(self, offsets: Mapping[str, Any], what: str) -> dict[int, int]:
        topic = self._options.changelog
        if set(offsets) != {topic}:
            raise SparkSourceError(
                f"the {what} offsets {dict(offsets)} are not offsets of changelog {topic!r}: "
                "the checkpoint belongs to a query of another changelog; use a new "
                "checkpointLocation"
            )
        parsed = {int(p): int(o) for p, o in offsets[topic].items()}
        held = set(self._rt().partitions)
        if set(parsed) != held:
            raise SparkSourceError(
                f"the {what} offsets cover partitions {sorted(parsed)} of {topic!r} but the "
                f"store at {self._options.path} holds {sorted(held)}: the checkpoint was "
                "written for another subset; use a new checkpointLocation"
            )
        return parsed

    def initialOffset(self) -> dict[str, Any]:
        rt = self._rt()
        partitions = rt.partitions
        starting = self._options.starting_offsets
        marks = rt.source.watermarks(partitions)
        if starting.kind == "earliest":
            chosen = {p: marks[p][0] for p in partitions}
        elif starting.kind == "latest":
            chosen = {p: marks[p][1] for p in partitions}
        else:
            given = dict(starting.offsets)
            missing = sorted(set(partitions) - set(given))
            extra = sorted(set(given) - set(partitions))
            if missing or extra:
                raise SparkSourceError(
                    f"option 'startingOffsets' must give exactly the followed partitions "
                    f"{list(partitions)} of {self._options.changelog!r} (missing {missing}, "
                    f"not followed {extra}); use -2 for earliest and -1 for latest"
                )
            chosen = {}
            for p, offset in given.items():
                low, high = marks[p]
                if offset == EARLIEST:
                    chosen[p] = low
                elif offset == LATEST:
                    chosen[p] = high
                elif not low <= offset <= high:
                    raise SparkSourceError(
                        f"option 'startingOffsets' asks for offset {offset} of "
                        f"{self._options.changelog}-{p}, which holds offsets {low}-{high}"
                    )
                else:
                    chosen[p] = offset
        _log.info("change feed of %s starts at %s", self._options.changelog, chosen)
        return self._format(chosen)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        rt = self._rt()
        begin = self._parse(start, "start")
        target = self._target
        if target is not None:
            self._wait_for_progress(rt, begin, target)
        applied = rt.applied()
        end = {}
        for p, offset in begin.items():
            reachable = applied[p] if target is None else min(applied[p], target[p])
            end[p] = max(offset, reachable)
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        return self._format(end)

    def _wait_for_progress(
        self, rt: FollowerRuntime, begin: Mapping[int, int], target: Mapping[int, int]
    ) -> None:
        """Trigger.AvailableNow ends when a batch is empty: wait until there is one to make
        (the follower applied something past ``begin``) unless ``begin`` is the target."""
        lagging = [p for p in begin if begin[p] < target[p]]
        if not lagging:
            return

        def progressed(applied: Mapping[int, int]) -> bool:
            return any(min(applied.get(p, 0), target[p]) > begin[p] for p in lagging)

        deadline = time.monotonic() + AVAILABLE_NOW_WAIT_S
        while not rt.follower.wait_for(progressed, min(30.0, AVAILABLE_NOW_WAIT_S)):
            rt.check()
            if time.monotonic() >= deadline:
                raise SparkSourceError(
                    f"Trigger.AvailableNow: the follower of {self._options.changelog!r} made "
                    f"no progress towards {dict(target)} in {AVAILABLE_NOW_WAIT_S:.0f} s "
                    f"(store at {dict(rt.applied())}); check kafka.bootstrap.servers"
                )

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self._options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The changelog's end offsets, as Spark's Kafka source reports its topic's: a
        query's progress (``lastProgress["sources"][0]``) then shows the follower's lag per
        partition as ``latestOffset`` minus ``endOffset``. (The Python Data Source API has no
        way to add source metrics such as the follower's state to the progress: its stream
        does not implement Spark's ``ReportsSourceMetrics``, in PySpark 4.2.0 and 4.3.0.)"""
        return self._format(self._rt().end_offsets())

    def prepareForTriggerAvailableNow(self) -> None:
        rt = self._rt()
        self._target = rt.source.end_offsets(rt.partitions)
        _log.info(
            "Trigger.AvailableNow: reading %s up to %s", self._options.changelog, self._target
        )

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin = self._parse(start, "start")
        finish = self._parse(end, "end")
        tasks: list[InputPartition] = []
        for p in sorted(finish):
            offset = begin.get(p, finish[p])
            while offset < finish[p]:
                upto = min(finish[p], offset + MAX_OFFSETS_PER_TASK)
                tasks.append(ChangelogRange(self._options.changelog, p, offset, upto))
                offset = upto
        return tasks

    def commit(self, end: dict[str, Any]) -> None:
        # The store records what it applied itself; nothing to do per batch.
        _log.debug("change feed of %s committed up to %s", self._options.changelog, end)

    def stop(self) -> None:
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    # -- executor side ----------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        freeze_long_lived()  # a task in a reused Python worker
        from spark_statestore.connectors.kafka.follower.ranges import (
            read_range,
            read_range_columns,
        )
        from spark_statestore.connectors.spark.follower.feed import (
            FeedStats,
            column_feed_batches,
            feed_batches,
        )

        assert isinstance(partition, ChangelogRange)
        options = self._options
        stats = FeedStats()
        extension = native.module()
        where = (
            options.bootstrap_servers,
            partition.topic,
            partition.partition,
            partition.start,
            partition.end,
        )
        chunks = None
        if (
            extension is not None
            and not options.include_headers
            and (options.store_type not in WINDOWED)
        ):
            chunks = read_range_columns(
                extension,
                *where,
                config=options.kafka,
                on_missing=options.on_missing_position,
                fail_on_data_loss=options.fail_on_data_loss,
            )
        if chunks is not None:
            yield from column_feed_batches(chunks, partition.topic, options, self._schema, stats)
        else:
            batches = read_range(
                *where, config=options.kafka, fail_on_data_loss=options.fail_on_data_loss
            )
            yield from feed_batches(batches, options, self._schema, stats)
        if stats.undecodable_keys or stats.undecodable_values or stats.missing_positions:
            _log.warning(
                "%s-%d [%d, %d): %d undecodable keys and %d values set to null "
                "(mode PERMISSIVE), %d records without a readable position",
                partition.topic,
                partition.partition,
                partition.start,
                partition.end,
                stats.undecodable_keys,
                stats.undecodable_values,
                stats.missing_positions,
            )
