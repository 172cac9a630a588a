"""Reading a store as it is now, on its own host: through its live owner, or from a private
checkpoint when nobody serves it.

Shared by the store host (:mod:`.server`), which reads for executors on other hosts, and by
the readers that run where the store is (no Spark driver around: a direct call).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.spark.reader.local import (
    OWNER_RECHECK_S,
    OWNER_WAIT_S,
    RECHECK_MAX_S,
    task_checkpoint,
)
from spark_statestore.position import Position, PositionBound
from spark_statestore.store.errors import StoreLockedError, StoreNotFoundError

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.store.scan import ScanSpec

__all__ = ["CurrentSnapshot", "current_snapshot", "lookup_current"]

_log = logging.getLogger(__name__)


@dataclass
class CurrentSnapshot:
    """One snapshot of a store, open until the :func:`current_snapshot` block ends.

    Attributes
    ----------
    position
        The snapshot's position (check it against the reader's bound).
    commit_seq
        The store commit it shows.
    via
        Who serves it: the owner's location, or ``"checkpoint"``.
    """

    position: Position
    commit_seq: int
    via: str
    _scan: Any
    _lookup: Any = None

    def batches(self, spec: ScanSpec) -> Iterator[pa.RecordBatch]:
        """The rows ``spec`` selects (schema
        :func:`~spark_statestore.store.snapshot.arrow_schema`)."""
        batches: Iterator[pa.RecordBatch] = self._scan(spec)
        return batches

    def table(self, spec: ScanSpec) -> pa.Table:
        """:meth:`batches` collected into one table."""
        import pyarrow as pa

        from spark_statestore.store.snapshot import arrow_schema

        return pa.Table.from_batches(list(self.batches(spec)), schema=arrow_schema())

    def lookup(self, keys: pa.Array) -> pa.Table:
        """The rows of ``keys`` (an Arrow binary array) that exist, each once, ascending: a
        multi-get in Arrow on a checkpoint, a key scan of the pinned snapshot on an owner."""
        if self._lookup is not None:
            table: pa.Table = self._lookup(keys)
            return table
        from spark_statestore.store.scan import ScanSpec

        return self.table(ScanSpec.for_keys(keys.to_pylist()))


def lookup_current(
    path: str,
    keys: pa.Array,
    *,
    purpose: str,
    bound: PositionBound,
    wait_s: float,
    framed_ids: frozenset[int] | None = None,
) -> tuple[pa.Table, Position]:
    """The rows of ``keys`` (an Arrow binary array without nulls) in one snapshot of the
    store at ``path`` as it is now, and that snapshot's position (check it against
    ``bound``): through its live owner in one call (no pin), or, as
    :func:`current_snapshot` reads, a private checkpoint. With ``framed_ids`` the keys are
    read as a key scan of one snapshot that first checks the store holds no key framed
    with another schema id (:attr:`~spark_statestore.store.scan.ScanSpec.framed_ids`).

    Raises
    ------
    StoreNotFoundError
        If no store is at ``path`` (after the wait, with a bound).
    ServeError
        If its owner fails the read.
    """
    from spark_statestore.serve import connect_to_owner

    if framed_ids is not None:
        from spark_statestore.store.scan import ScanSpec

        spec = ScanSpec(keys=tuple(keys.to_pylist()), framed_ids=framed_ids)
        with current_snapshot(path, purpose=purpose, bound=bound, wait_s=wait_s) as now:
            return now.table(spec), now.position
    client = connect_to_owner(path)
    if client is not None:
        with client:
            table, reply = client.lookup(keys, bound, wait_s=wait_s)
        return table, reply.position
    with current_snapshot(path, purpose=purpose, bound=bound, wait_s=wait_s) as now:
        return now.lookup(keys), now.position


@contextlib.contextmanager
def current_snapshot(
    path: str, *, purpose: str, bound: PositionBound, wait_s: float
) -> Iterator[CurrentSnapshot]:
    """The store at ``path`` as it is now: a snapshot pinned in its live owner (which first
    waits up to ``wait_s`` for a commit reaching ``bound``), or, when no process serves it, a
    private checkpoint (taken again, up to ``wait_s``, until it reaches ``bound``; a store that
    does not exist yet has not reached a bound either). The snapshot may still be short of
    ``bound`` when the wait is over: the caller checks :attr:`CurrentSnapshot.position`.

    Raises
    ------
    StoreNotFoundError
        If no store is at ``path`` (after the wait, with a bound).
    ServeError
        If its owner fails the read.
    """
    from spark_statestore.serve import connect_to_owner

    deadline = time.monotonic() + wait_s
    owner_deadline = time.monotonic() + OWNER_WAIT_S
    pause = 0.05
    while True:
        client = connect_to_owner(path)
        if client is not None:
            with client:
                pinned = client.pin(bound, wait_s=max(0.0, deadline - time.monotonic()))
                try:
                    yield CurrentSnapshot(
                        pinned.position,
                        pinned.commit_seq,
                        client.location,
                        functools.partial(client.scan, snapshot_id=pinned.snapshot_id),
                    )
                finally:
                    client.release(pinned.snapshot_id)
            return
        try:
            with contextlib.ExitStack() as taken:
                try:
                    store = taken.enter_context(
                        task_checkpoint(path, purpose, owner_wait_s=OWNER_RECHECK_S)
                    )
                except StoreLockedError:
                    # Taken since we looked for a server: a sink's commit (wait it out) or a
                    # follower query or serve starting (look again: it will serve). Waiting
                    # on the lock alone missed a server that started meanwhile.
                    if time.monotonic() > owner_deadline:
                        raise
                    continue
                snapshot = taken.enter_context(store.snapshot())
                remaining = deadline - time.monotonic()
                if bound.permits(snapshot.position) or remaining <= 0:
                    from spark_statestore.store.scan import scan_batches

                    yield CurrentSnapshot(
                        snapshot.position,
                        snapshot.commit_seq,
                        "checkpoint",
                        functools.partial(scan_batches, snapshot),
                        functools.partial(_lookup_table, snapshot),
                    )
                    return
        except StoreNotFoundError:
            remaining = deadline - time.monotonic()
            if bound.is_unbounded() or remaining <= 0:
                raise
        # No owner serves the store, so no commit wakes us: look again soon (through an
        # owner if one has started meanwhile).
        _log.info(
            "the store at %s has not reached %s: checking again in %.2f s",
            path,
            bound.to_json(),
            min(pause, remaining),
        )
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, RECHECK_MAX_S)


def _lookup_table(snapshot: Any, keys: pa.Array) -> pa.Table:
    import pyarrow as pa

    from spark_statestore.store.scan import lookup_batches
    from spark_statestore.store.snapshot import arrow_schema

    return pa.Table.from_batches(list(lookup_batches(snapshot, keys)), schema=arrow_schema())
