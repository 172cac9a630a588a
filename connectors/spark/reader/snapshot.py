"""The snapshot reader: ``spark.read.format("spark_statestore").load(path)``.

Reads one consistent snapshot of a store. When the store has a live owner (a running
follower query), the reader goes through the owner's Flight server: planning pins a
snapshot, the task reads exactly that snapshot, and its position is the one checked
against ``positionBound``. With no live owner the reader opens the store itself (it is
not changing then; the task checks that the commit it planned for is still the latest).

Views (``view``): ``data`` (default: key, value, partition, offset, timestamp of the
latest write per key, and the columns of :mod:`.columns`), ``position`` (the snapshot's
position, one row per input topic-partition), ``lag`` (per changelog partition: current,
end, lag) and ``metadata``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from spark_statestore.connectors.spark.errors import (
    NotUpToBoundError,
    SparkSourceError,
    StaleSnapshotError,
)
from spark_statestore.connectors.spark.format_options import codecs_for
from spark_statestore.connectors.spark.options import ReaderOptions, View
from spark_statestore.connectors.spark.reader.columns import convert_batch, data_ddl
from spark_statestore.connectors.spark.reader.local import (
    OWNER_RECHECK_S,
    OWNER_WAIT_S,
    RECHECK_MAX_S,
)
from spark_statestore.connectors.spark.reader.tasks import (
    RowsTask,
    ScanTask,
    host_row,
    owner_scan_task,
    placement,
)
from spark_statestore.connectors.spark.reader.views import VIEW_DDL, health_row, view_rows
from spark_statestore.connectors.spark.windows import WINDOWED
from spark_statestore.connectors.spark.worker_gc import freeze_long_lived
from spark_statestore.health import NOT_OPEN, Health, HealthState, served
from spark_statestore.position import Position
from spark_statestore.store.errors import StoreLockedError, StoreNotFoundError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from spark_statestore.query import LagInfo
    from spark_statestore.serve.protocol import StoreDescription
    from spark_statestore.store.ownership import OwnerInfo
    from spark_statestore.store.scan import ScanSpec

__all__ = [
    "PushdownSnapshotReader",
    "SnapshotReader",
    "reader_ddl",
]

_log = logging.getLogger(__name__)


def reader_ddl(options: ReaderOptions) -> str:
    """The snapshot reader's schema as DDL, for its view, store type and formats."""
    if options.view is not View.DATA:
        return VIEW_DDL[options.view]
    return data_ddl(options)


class SnapshotReader(DataSourceReader):
    """Reads one consistent snapshot of a store (or one of its views)."""

    def __init__(self, options: ReaderOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema
        self._scan_json: str | None = None
        self._pushed: list[str] = []

    def _spec(self) -> ScanSpec:
        """The lookup options' scan, narrowed by the pushed filters."""
        from spark_statestore.store.scan import ScanSpec

        if self._scan_json is None:
            return self._options.lookup
        return self._options.lookup.intersect(ScanSpec.from_json(self._scan_json))

    # -- planning (driver) -------------------------------------------------------------------
    def partitions(self) -> list[InputPartition]:
        from spark_statestore.serve import connect_to_owner

        if self._options.view is View.HOST:
            return [RowsTask([host_row(self._options.path)])]
        deadline = time.monotonic() + self._options.position_bound_timeout_s
        owner_deadline = time.monotonic() + OWNER_WAIT_S
        pause = 0.05
        while True:
            client = connect_to_owner(self._options.path)
            if client is not None:
                with client:
                    return self._plan_with_owner(client, deadline)
            if self._wait_for_server():
                continue  # an owner started serving: read through it
            try:
                return self._plan_local()
            except StoreLockedError:
                # Taken since we looked for a server: a sink's commit (wait it out) or a
                # follower query or serve starting (look again: it will serve). Waiting on
                # the lock alone missed a server that started meanwhile, until OWNER_WAIT_S.
                if time.monotonic() > owner_deadline:
                    raise
                continue
            except NotUpToBoundError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise
            except StoreNotFoundError:
                # No store yet (e.g. the follower query that creates it has just started):
                # it has not reached the bound either, so a bounded read waits for it too.
                remaining = deadline - time.monotonic()
                if self._options.position_bound.is_unbounded() or remaining <= 0:
                    raise
            # No owner is serving the store, so no commit will wake us: check again soon,
            # through the owner if one has started meanwhile.
            _log.info(
                "the store at %s has not reached positionBound %s: checking again in %.2f s",
                self._options.path,
                self._options.position_bound.to_json(),
                min(pause, remaining),
            )
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, RECHECK_MAX_S)

    def _wait_for_server(self) -> bool:
        """While a follower query owns the store and is starting its Flight server, wait for
        the server (up to :data:`OWNER_WAIT_S`): the store will not be free while it runs.
        False when no owner is starting up (the caller opens the store itself)."""
        from spark_statestore.store.ownership import live_owner

        path = self._options.path
        owner = live_owner(path)
        if owner is None or not owner.serves or owner.flight_location:
            return False
        deadline = time.monotonic() + OWNER_WAIT_S
        pause = 0.02
        while owner is not None and owner.serves and not owner.flight_location:
            if time.monotonic() > deadline:
                raise SparkSourceError(
                    f"the store at {path} is owned by {owner.describe()}, which has not served "
                    f"it in {OWNER_WAIT_S:g} s; check that query, or stop it to read the store "
                    "directly"
                )
            _pause(pause)
            pause = min(pause * 2, 0.5)
            owner = live_owner(path)
        return True

    def _plan_with_owner(self, client: Any, deadline: float) -> list[InputPartition]:
        view = self._options.view
        bound = self._options.position_bound
        wait_s = max(0.0, deadline - time.monotonic())
        if view is View.DATA:
            # The owner waits (up to the deadline) for the commit that reaches the bound.
            pinned = client.pin(bound, wait_s=wait_s)
            try:
                self._check_bound(pinned.position)
                if self._options.max_lag is not None:
                    self._check_lag(_lag_pairs(client.lags()))
            except BaseException:
                client.release(pinned.snapshot_id)
                raise
            spec_json = self._spec().to_json()
            _log.info(
                "reading %s through its owner %s: snapshot %s, commit %d, position %s",
                self._options.path,
                client.location,
                pinned.snapshot_id,
                pinned.commit_seq,
                pinned.position.to_json(),
            )
            return [owner_scan_task(self._options.path, spec_json, client, pinned)]
        if not bound.is_unbounded() and wait_s > 0:
            client.release(client.pin(bound, wait_s=wait_s).snapshot_id)
        reply = client.describe()
        lags = _lag_pairs(reply.lags)
        if view is not View.HEALTH:  # health reports a lagging or restoring store as such
            self._check_bound(reply.description.position)
            if self._options.max_lag is not None:
                self._check_lag(lags)
        health = reply.health or served(reply.owner.purpose, reply.owner.started_at)
        return [
            RowsTask(
                view_rows(
                    self._options.view,
                    self._options.path,
                    reply.description,
                    reply.owner,
                    lags,
                    health,
                )
            )
        ]

    def _plan_local(self) -> list[InputPartition]:
        from spark_statestore.serve.protocol import StoreDescription
        from spark_statestore.store import Store, StoreOptions
        from spark_statestore.store.ownership import live_owner, read_owner

        if self._options.view is View.HEALTH:
            owner = live_owner(self._options.path)
            if owner is not None:  # it holds the store and serves nothing to ask
                health = Health(
                    HealthState.UNKNOWN,
                    f"owned by {owner.describe()}, which serves no Flight server to ask: "
                    "read its /health endpoint (metricsPort, --metrics-port)",
                )
                return [RowsTask([health_row(self._options.path, None, owner, None, health)])]

        # A sink's commit owns its store for the commit only: wait for it a moment, then the
        # caller looks again for a server (the owner may be one that serves) and comes back.
        wait = StoreOptions(owner_wait_seconds=OWNER_RECHECK_S)
        with Store.open(
            self._options.path, purpose="Spark snapshot read (planning)", options=wait
        ) as store:
            metadata = store.metadata
            manifest = store.manifest
        lags = self._lags_from_kafka(manifest, metadata.changelog_offsets)
        if self._options.view is View.HEALTH:
            description = StoreDescription.of_state(self._options.path, manifest, metadata)
            health = Health(HealthState.STOPPED, NOT_OPEN, None)
            return [
                RowsTask(
                    view_rows(
                        self._options.view, self._options.path, description, None, lags, health
                    )
                )
            ]
        self._check_bound(metadata.position)
        if self._options.max_lag is not None:
            if lags is None:
                raise SparkSourceError(
                    f"option 'maxLag': the store at {self._options.path} has no live follower "
                    "to report its lag; set kafka.bootstrap.servers so the reader can ask "
                    "the changelog, or drop maxLag"
                )
            self._check_lag(lags)
        if self._options.view is View.DATA:
            spec_json = self._spec().to_json()
            _log.info(
                "reading %s directly: commit %d, position %s",
                self._options.path,
                metadata.commit_seq,
                metadata.position.to_json(),
            )
            return [
                ScanTask(
                    spec_json, None, None, metadata.commit_seq, **placement(self._options.path)
                )
            ]
        description = StoreDescription.of_state(self._options.path, manifest, metadata)
        owner = read_owner(self._options.path)
        return [
            RowsTask(
                view_rows(self._options.view, self._options.path, description, owner, lags, None)
            )
        ]

    def _rows(
        self,
        description: StoreDescription,
        owner: OwnerInfo | None,
        lags: Mapping[int, tuple[int, int | None]] | None,
        health: Health | None,
    ) -> RowsTask:
        """The task that yields this reader's view's rows."""
        return RowsTask(
            view_rows(self._options.view, self._options.path, description, owner, lags, health)
        )

    def _check_bound(self, position: Position) -> None:
        bound = self._options.position_bound
        if not bound.permits(position):
            waited = self._options.position_bound_timeout_s
            after = f" after waiting {waited:g} s (positionBoundTimeoutMs)" if waited else ""
            raise NotUpToBoundError(
                f"NOT_UP_TO_BOUND: the store at {self._options.path} is at position "
                f"{position.to_json()}, which has not reached positionBound "
                f"{bound.to_json()}{after}; the follower is behind the writes you asked for: "
                "retry later, set positionBoundTimeoutMs to wait, or read without "
                "positionBound"
            )

    def _check_lag(self, lags: Mapping[int, tuple[int, int | None]] | None) -> None:
        limit = self._options.max_lag
        if limit is None or lags is None:
            return
        worst = {p: end - cur for p, (cur, end) in lags.items() if end is not None}
        behind = {p: lag for p, lag in worst.items() if lag > limit}
        if behind:
            raise StaleSnapshotError(
                f"the store at {self._options.path} lags its changelog by {behind} records "
                f"(partition: lag), more than maxLag={limit}; retry when the follower has "
                "caught up, or raise maxLag"
            )

    def _lags_from_kafka(
        self, manifest: Any, offsets: Mapping[int, int]
    ) -> dict[int, tuple[int, int | None]] | None:
        if self._options.bootstrap_servers is None or manifest.changelog_topic is None:
            return None
        from spark_statestore.connectors.kafka.follower.source import changelog_lags

        return _lag_pairs(
            changelog_lags(
                self._options.bootstrap_servers,
                manifest.changelog_topic,
                manifest.holds,
                offsets,
                config=self._options.kafka,
            )
        )

    # -- reading (executor) ------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[Any]:
        freeze_long_lived()  # a task in a reused Python worker
        if isinstance(partition, RowsTask):
            yield from partition.rows
            return
        assert isinstance(partition, ScanTask)
        from spark_statestore.store.scan import ScanSpec

        spec = ScanSpec.from_json(partition.scan)
        if partition.location is not None:
            done = yield from self._read_planned_owner(partition, spec)
            if done:
                return
        # Spark replays a relation's planned partitions for later queries of the same
        # DataFrame or view, so the store's owner may have changed since planning: route
        # again, to whoever serves the store now, or to the store itself.
        yield from self._read_current(partition, spec)

    def _read_planned_owner(
        self, partition: ScanTask, spec: ScanSpec
    ) -> Generator[pa.RecordBatch, None, bool]:
        """Read through the owner that planned the read; False if it is gone (nothing read)."""
        from spark_statestore.serve import (
            AuthenticationError,
            ServerUnavailableError,
            SnapshotExpiredError,
            StoreClient,
            client_for_store,
        )

        assert partition.location is not None
        try:
            if partition.credentials is not None:
                client = StoreClient.from_credentials(partition.location, partition.credentials)
            else:
                client = client_for_store(partition.store, partition.location)
        except AuthenticationError as exc:  # that owner stopped and took its credentials
            _log.info(
                "the owner of %s that planned this read is gone (%s)", self._options.path, exc
            )
            return False
        with client:
            batches = client.scan(spec, partition.snapshot_id)
            try:
                first = next(batches, None)
            except SnapshotExpiredError:
                # The plan runs again (a re-executed DataFrame) after its pin was released:
                # read the owner's current snapshot, at least as new as the planned one.
                _log.info(
                    "snapshot %s of %s was released; reading the current one",
                    partition.snapshot_id,
                    self._options.path,
                )
                yield from self._read_pinned(client, spec)
                return True
            except (ServerUnavailableError, AuthenticationError) as exc:
                # The server is gone, or the store has another owner now (its credentials
                # changed). Nothing was read yet, so routing again is safe. (A failure mid-stream
                # propagates: Spark retries the task, which routes from the start.)
                _log.info(
                    "the owner of %s that planned this read is gone (%s): routing again",
                    self._options.path,
                    exc,
                )
                return False
            if first is not None:
                yield self._convert(first)
            for batch in batches:
                yield self._convert(batch)
            if partition.snapshot_id is not None:
                client.release(partition.snapshot_id)
        return True

    def _read_pinned(self, client: Any, spec: ScanSpec) -> Iterator[pa.RecordBatch]:
        """Read the owner's current snapshot, pinned so its position can be checked."""
        pinned = client.pin(None)
        try:
            self._check_bound(pinned.position)
            for batch in client.scan(spec, pinned.snapshot_id):
                yield self._convert(batch)
        finally:
            client.release(pinned.snapshot_id)

    def _read_current(self, partition: ScanTask, spec: ScanSpec) -> Iterator[pa.RecordBatch]:
        """Read the store as it is now: through the driver's store host (the task may run on
        another host), or, with no Spark driver, through its owner or a private checkpoint
        here. Either way the snapshot is checked against the bound."""
        from spark_statestore.position import PositionBound

        unbounded = PositionBound.unbounded()
        if partition.host is not None:
            from spark_statestore.connectors.spark.host import StoreHostClient

            with (
                StoreHostClient(partition.host) as host,
                host.scan(partition.store, spec, unbounded) as (position, batches),
            ):
                self._check_bound(position)
                for batch in batches:
                    yield self._convert(batch)
            return
        from spark_statestore.connectors.spark.host.reads import current_snapshot

        purpose = "Spark snapshot read"
        with current_snapshot(partition.store, purpose=purpose, bound=unbounded, wait_s=0) as now:
            if now.commit_seq != partition.commit_seq:
                # Spark 4.3 caches a relation's planned partitions and replays them for later
                # queries of the same DataFrame or view: read the store as it is now, still
                # within the bound the query asked for.
                _log.info(
                    "store %s moved from commit %d (planned) to %d: reading the current one",
                    partition.store,
                    partition.commit_seq,
                    now.commit_seq,
                )
            self._check_bound(now.position)
            for batch in now.batches(spec):
                yield self._convert(batch)

    def _convert(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return convert_batch(batch, self._options, self._schema)


class PushdownSnapshotReader(SnapshotReader):
    """The snapshot reader that also pushes key and partition filters into the store.

    Used only where Spark scopes a pushed-down plan to its one scan
    (:func:`~spark_statestore.connectors.spark.reader.lookup.spark_scopes_pushdown_per_scan`):
    PySpark 4.x replays a relation's pushed plan for the later scans of the same DataFrame
    or temp view, where a pushed filter would return the previous query's rows. There the
    plain :class:`SnapshotReader` reads every row for Spark to filter, and the lookup
    options (``keys``, ``keyPrefix``, ``keyFrom``/``keyTo``, ``partitions``) are the fast path.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        if self._options.view is not View.DATA:
            yield from filters
            return
        from spark_statestore.connectors.spark.reader.pushdown import push_filters

        key_codec, _ = codecs_for(self._options.formats)
        # Window and session stores hold user keys with a window suffix: a key filter is
        # not a scan of stored keys, so only partition filters are pushed there.
        pushdown, rest = push_filters(
            filters, key_codec, keys=self._options.store_type not in WINDOWED
        )
        self._scan_json = pushdown.spec().to_json()
        self._pushed = pushdown.pushed
        _log.info("pushed to store %s: %s", self._options.path, pushdown.pushed)
        yield from rest


def _pause(seconds: float) -> None:
    """Wait between two looks at a starting owner (its owner file changes; nothing signals)."""
    time.sleep(seconds)


def _lag_pairs(lags: Mapping[int, LagInfo] | None) -> dict[int, tuple[int, int | None]] | None:
    """``{partition: (current, end)}`` of a server's lags (None: it reports none)."""
    if lags is None:
        return None
    return {p: (info.current_offset_position, info.end_offset_position) for p, info in lags.items()}
