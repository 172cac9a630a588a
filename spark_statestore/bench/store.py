"""The ``store`` suite: the LevelDB store engine against bare plyvel on the same machine.

``txn_commit``
    Committed puts/s through store transactions (``put_all`` + ``commit``) against a bare
    plyvel ``WriteBatch`` loop writing the same keys and values with the same durability
    (no fsync). Also reported, without a target: one ``put`` call per record, and both sides
    with ``sync=True``.
``snapshot_get``
    Point gets/s of existing keys, in one fixed shuffled order, through
    :meth:`Snapshot.get <spark_statestore.store.Snapshot.get>` against bare ``DB.get``.

Every timed run writes into a fresh, empty database, so both sides start from the same
state; opening, checking and deleting the databases is not timed.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.measure import BenchOptions, Measurement, interleave, timed
from spark_statestore.store import Role, Store, StoreOptions, StoreSpec

__all__ = ["SNAPSHOT_GET_TARGET", "SUITE", "TXN_COMMIT_TARGET", "run_store_suite"]

SUITE = "store"
TXN_COMMIT_TARGET = 0.7
"""The store's bulk commit path should reach 70 % of a bare WriteBatch loop."""
SNAPSHOT_GET_TARGET = 0.7
"""Snapshot point gets should reach 70 % of bare ``DB.get`` (issue 40)."""

KEY_FORMAT = b"key-%08d"
_TIMESTAMP_MS = 1_700_000_000_000
_SPEC = StoreSpec(Role.LEADER, None, 1)

Pair = tuple[bytes, bytes]
Record = tuple[bytes, bytes, int, int, int]


@dataclass(frozen=True, slots=True)
class _Workload:
    """The same records, cut into the same batches, in the shape each side takes."""

    pairs: list[list[Pair]]
    records: list[list[Record]]

    @classmethod
    def build(cls, options: BenchOptions) -> _Workload:
        size, step = options.value_bytes, options.batch_records
        records = [
            (KEY_FORMAT % i, (b"%0*d" % (size, i))[-size:], 0, i, _TIMESTAMP_MS + i)
            for i in range(options.records)
        ]
        batches = [records[s : s + step] for s in range(0, len(records), step)]
        return cls(pairs=[[(r[0], r[1]) for r in batch] for batch in batches], records=batches)

    @property
    def count(self) -> int:
        return sum(map(len, self.records))

    def check(self, get: Callable[[bytes], bytes | None], what: str) -> None:
        """Fail unless ``get`` reads the last record back (the run really stored it)."""
        key, expected = self.pairs[-1][-1]
        found = get(key)
        if found != expected:
            raise BenchError(
                f"bench suite {SUITE}: {what} did not store its records: key {key!r} reads "
                f"{found!r}, expected {expected!r}; its rate would be meaningless"
            )


def run_store_suite(options: BenchOptions) -> list[Measurement]:
    """Measure the store engine's commit and read paths against bare plyvel.

    Parameters
    ----------
    options
        Sizes and rounds of the run.

    Returns
    -------
    list of Measurement
        ``txn_commit`` (target :data:`TXN_COMMIT_TARGET`), ``txn_commit_put``,
        ``txn_commit_sync`` (no target) and ``snapshot_get`` (target
        :data:`SNAPSHOT_GET_TARGET`).

    Raises
    ------
    BenchError
        If a path did not store what it was given.
    """
    workload = _Workload.build(options)
    with tempfile.TemporaryDirectory(prefix="spark-statestore-bench-") as root:
        return [*_txn_commit(root, workload, options), _snapshot_get(root, workload, options)]


# -- txn_commit ---------------------------------------------------------------------------
def _txn_commit(root: str, work: _Workload, options: BenchOptions) -> list[Measurement]:
    rates = interleave(
        {
            "bare": partial(_bare_commit_run, root, work, sync=False),
            "bare_sync": partial(_bare_commit_run, root, work, sync=True),
            "put_all": partial(_store_commit_run, root, work, _commit_bulk, sync=False),
            "put": partial(_store_commit_run, root, work, _commit_each, sync=False),
            "put_all_sync": partial(_store_commit_run, root, work, _commit_bulk, sync=True),
        },
        options.rounds,
    )

    def measurement(
        name: str, candidate: str, what: str, sync: bool, target: float | None
    ) -> Measurement:
        baseline = "bare_sync" if sync else "bare"
        return Measurement(
            suite=SUITE,
            name=name,
            unit="puts/s",
            candidate=f"store {what} + commit (sync={sync})",
            baseline=f"plyvel WriteBatch put + write (sync={sync})",
            candidate_rates=tuple(rates[candidate]),
            baseline_rates=tuple(rates[baseline]),
            target=target,
            parameters=_commit_parameters(work, options, sync),
        )

    return [
        measurement("txn_commit", "put_all", "Transaction.put_all", False, TXN_COMMIT_TARGET),
        measurement("txn_commit_put", "put", "Transaction.put per record", False, None),
        measurement("txn_commit_sync", "put_all_sync", "Transaction.put_all", True, None),
    ]


def _commit_parameters(work: _Workload, options: BenchOptions, sync: bool) -> dict[str, Any]:
    return {
        "records": work.count,
        "batch_records": options.batch_records,
        "transactions": len(work.records),
        "key_format": KEY_FORMAT.decode(),
        "value_bytes": options.value_bytes,
        "partitions": _SPEC.partitions,
        "sync": sync,
        "rounds": options.rounds,
    }


def _bare_commit_run(root: str, work: _Workload, *, sync: bool) -> float:
    path = tempfile.mkdtemp(prefix="bare-", dir=root)
    try:
        with _bare_db(path) as db:
            seconds = timed(partial(_write_batches, db, work.pairs, sync))
            work.check(db.get, "a bare plyvel WriteBatch loop")
    finally:
        shutil.rmtree(path)
    return work.count / seconds


def _store_commit_run(
    root: str, work: _Workload, commit: Callable[[Store, list[list[Record]]], None], *, sync: bool
) -> float:
    path = tempfile.mkdtemp(prefix="store-", dir=root)
    try:
        with _open_store(path, sync=sync) as store:
            seconds = timed(partial(commit, store, work.records))
            work.check(store.get, f"a store transaction loop ({commit.__name__})")
    finally:
        shutil.rmtree(path)
    return work.count / seconds


def _write_batches(db: Any, batches: Sequence[Sequence[Pair]], sync: bool) -> None:
    for batch in batches:
        wb = db.write_batch(sync=sync)
        put = wb.put
        for key, value in batch:
            put(key, value)
        wb.write()


def _commit_bulk(store: Store, batches: Sequence[Sequence[Record]]) -> None:
    for batch in batches:
        txn = store.begin()
        txn.put_all(batch)
        txn.commit()


def _commit_each(store: Store, batches: Sequence[Sequence[Record]]) -> None:
    for batch in batches:
        txn = store.begin()
        put = txn.put
        for key, value, _partition, offset, timestamp in batch:
            put(key, value, offset=offset, timestamp=timestamp)
        txn.commit()


# -- snapshot_get -------------------------------------------------------------------------
def _snapshot_get(root: str, work: _Workload, options: BenchOptions) -> Measurement:
    order = [key for batch in work.pairs for key, _ in batch]
    random.Random(options.seed).shuffle(order)
    bare_path = tempfile.mkdtemp(prefix="bare-", dir=root)
    store_path = tempfile.mkdtemp(prefix="store-", dir=root)
    # Load both, then reopen both: reads then come from table files through a cold block
    # cache on either side, not from one side's memtable.
    with _bare_db(bare_path) as db:
        _write_batches(db, work.pairs, sync=False)
    with _open_store(store_path, sync=False) as store:
        _commit_bulk(store, work.records)
    with _bare_db(bare_path) as db, _open_store(store_path, sync=False) as store:
        work.check(db.get, "the bare database loaded for snapshot_get")
        work.check(store.get, "the store loaded for snapshot_get")
        rates = interleave(
            {
                "bare": partial(_bare_get_run, db, order),
                "snapshot": partial(_snapshot_get_run, store, order),
            },
            options.rounds,
        )
    return Measurement(
        suite=SUITE,
        name="snapshot_get",
        unit="gets/s",
        candidate="store Snapshot.get",
        baseline="plyvel DB.get",
        candidate_rates=tuple(rates["snapshot"]),
        baseline_rates=tuple(rates["bare"]),
        target=SNAPSHOT_GET_TARGET,
        parameters={
            "keys_loaded": work.count,
            "gets": len(order),
            "order": "shuffled existing keys",
            "seed": options.seed,
            "key_format": KEY_FORMAT.decode(),
            "value_bytes": options.value_bytes,
            "rounds": options.rounds,
        },
    )


def _bare_get_run(db: Any, keys: Sequence[bytes]) -> float:
    return len(keys) / timed(partial(_get_each, db.get, keys))


def _snapshot_get_run(store: Store, keys: Sequence[bytes]) -> float:
    def work() -> None:
        with store.snapshot() as snapshot:
            _get_each(snapshot.get, keys)

    return len(keys) / timed(work)


def _get_each(get: Callable[[bytes], bytes | None], keys: Sequence[bytes]) -> None:
    for key in keys:
        get(key)


# -- scratch databases --------------------------------------------------------------------
@contextmanager
def _bare_db(path: str) -> Iterator[Any]:
    import plyvel

    # The same LevelDB tuning as the store's, so the ratio measures the store's own cost.
    db = plyvel.DB(path, create_if_missing=True, **StoreOptions().leveldb_options())
    try:
        yield db
    finally:
        db.close()


def _open_store(path: str, *, sync: bool) -> Store:
    return Store.open(
        path, _SPEC, purpose="spark-statestore bench", options=StoreOptions(sync=sync)
    )
