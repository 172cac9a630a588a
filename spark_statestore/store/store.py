"""The store handle: open/create, ownership, recovery, transactions, snapshots, queries.

Why one module of over 500 lines: opening, recovery, ownership and closing are one
lifecycle under one lock and gate (a deferred commit is applied by its open or its close);
what can stand alone (transactions, snapshots, redo, deferred commits' format, ownership,
checkpoints, queries) is in its own module already.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Any

from spark_statestore.store.crash import crash_point
from spark_statestore.store.deferred import DeferredCommit, record_columns_of
from spark_statestore.store.errors import (
    RECOVERY_HINT,
    StoreClosedError,
    StoreCorruptedError,
    StoreError,
    StoreIOError,
    StoreLockedError,
    StoreMismatchError,
    StoreNotFoundError,
    StoreRoleError,
    TransactionError,
)
from spark_statestore.store.files import fsync_dir, make_private_dir
from spark_statestore.store.gate import Gate
from spark_statestore.store.layout import (
    DATA_PREFIX,
    META_COMMIT,
    META_MANIFEST,
    META_OFFSETS,
    META_PENDING,
    META_POSITION,
    META_REDO,
    META_SEQ,
    META_STORE_WIDE,
)
from spark_statestore.store.leveldb import binding
from spark_statestore.store.manifest import (
    KEY_VALUE_FORMAT_VERSION,
    VERSIONED_FORMAT_VERSION,
    CommitRecord,
    Role,
    StoreManifest,
    StoreMetadata,
    decode_offsets,
    decode_position,
    decode_seq,
)
from spark_statestore.store.ownership import OwnerInfo, OwnerLock
from spark_statestore.store.point import point_reads, raise_read_error
from spark_statestore.store.readers import remove_stale_checkpoints
from spark_statestore.store.redo import (
    RedoMarker,
    SpillArea,
    apply_redo,
    remove_stray_redo,
)
from spark_statestore.store.snapshot import Snapshot
from spark_statestore.store.spec import StoreOptions, StoreSpec
from spark_statestore.store.transaction import Transaction
from spark_statestore.store.unsynced import check_unsynced, clear_unsynced, mark_unsynced

if TYPE_CHECKING:
    import plyvel

    from spark_statestore.query import StateQueryRequest, StateQueryResult

__all__ = ["DB_DIR", "Store"]

DB_DIR = "db"
"""The LevelDB database inside a store directory."""

_log = logging.getLogger(__name__)


class Store:
    """An open store: one directory, one LevelDB, one owner (this process).

    Open with :meth:`open`. A handle opened with a :class:`StoreSpec` is a *writer* with that
    role and may :meth:`begin` transactions; a handle opened without one is read-only. Read
    with :meth:`snapshot` or :meth:`query`. Close it (or use ``with``) to give up ownership.

    Thread-safe: one thread may run a transaction while others take snapshots and query.
    """

    def __init__(
        self,
        path: str,
        db: plyvel.DB,
        manifest: StoreManifest,
        role: Role | None,
        options: StoreOptions,
        lock: OwnerLock,
    ) -> None:
        self.path = path
        self.manifest = manifest
        self.role = role
        self.options = options
        self._db: plyvel.DB | None = db
        # Every LevelDB call of this handle runs inside the gate, but the extension's point
        # reads: its database counts those itself (see spark_statestore.store.point).
        self._gate = Gate(path)
        self._value = point_reads(db, self._gate, path)[0]  # Store.get's
        self._lock = lock
        self._mutex = threading.RLock()
        self._committed = threading.Condition(self._mutex)
        self._txn: Transaction | None = None
        self._pinned: _PinnedSnapshot | None = None
        self._snapshots: weakref.WeakSet[Snapshot] = weakref.WeakSet()
        self._unsynced = False  # a sync=False writer: make everything durable on close
        self._metadata = _read_metadata(db, path)
        raw_pending = db.get(META_PENDING)
        self._pending: DeferredCommit | None = (
            None if raw_pending is None else DeferredCommit.from_json(raw_pending, path)
        )
        self.position_note: str | None = None
        """Why this store's position may not be advancing, set by the process that feeds it
        (a follower whose leader's progress cannot be read, say); NOT_UP_TO_BOUND answers
        carry it. Not persisted: the position on disk is always a true lower bound."""

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        spec: StoreSpec | None = None,
        *,
        purpose: str = "",
        options: StoreOptions | None = None,
        serves: bool = False,
    ) -> Store:
        """Open (with a ``spec``: create when missing) the store at ``path``.

        Parameters
        ----------
        path
            The store directory.
        spec
            What a writer expects the store to be; None opens an existing store read-only.
        purpose
            What this process does with the store, recorded in ``_owner.json``.
        options
            :class:`StoreOptions`.
        serves
            This process will serve the store over Flight (and then records the location
            with :meth:`update_owner`): readers meanwhile wait for the location instead of
            for the store to be free.

        Raises
        ------
        StoreNotFoundError
            No store at ``path`` and no ``spec`` to create one.
        StoreLockedError
            Another live process (or handle) owns the store; the error names it.
        StoreMismatchError, StoreRoleError
            The store belongs to another topic / partition count / name, or has the other role.
        StoreFormatError, StoreCorruptedError
            The store is newer than this code, or damaged (the message says how to recover).
        """
        leveldb = binding()
        path = os.path.abspath(os.fspath(path))
        _await_background_close(path)
        options = options or StoreOptions()
        db_path = os.path.join(path, DB_DIR)
        if spec is None and not os.path.isdir(db_path):
            raise StoreNotFoundError(
                f"no store at {path}: nothing to open; create one by opening it with a "
                "StoreSpec (a follower or a sink does that)",
                path,
            )
        make_private_dir(path)
        role_name = spec.role.value if spec is not None else "reader"
        lock = OwnerLock.acquire(
            path,
            OwnerInfo.for_this_process(role_name, purpose, serves=serves),
            options.lock_wait_seconds,
            owner_wait_seconds=options.owner_wait_seconds,
        )
        db = None
        unsynced = spec is not None and not options.sync
        try:
            pending = check_unsynced(path)
            if unsynced:
                mark_unsynced(path)  # before the first unsynced write
            created = not os.path.isdir(db_path)
            db = _open_leveldb(leveldb, db_path, spec is not None, options)
            opening = Gate(path)
            with opening:
                manifest = _load_or_create_manifest(db, path, spec)
                if created:  # the new database's names survive a power cut
                    fsync_dir(db_path)
                    fsync_dir(path)
                    fsync_dir(os.path.dirname(path))
                _check_spec(path, manifest, spec)
                _recover(db, path, options)
            if pending and not unsynced and _flush(db, path):
                clear_unsynced(path)  # a dead sync=False writer's writes are durable now
            store = cls(path, db, manifest, spec.role if spec else None, options, lock)
            store._unsynced = unsynced
            if store._pending is not None:
                _log.info("store %s: applying a committed batch its writer left", path)
                store.apply_pending()
        except BaseException:
            if db is not None:
                db.close()
            lock.release()
            raise
        _log.info(
            "opened store %s (%s, changelog %s, %d partitions, commit %d) as %s",
            path,
            manifest.role.value,
            manifest.changelog_topic,
            manifest.partitions,
            store._metadata.commit_seq,
            role_name,
        )
        return store

    # -- what the store is ----------------------------------------------------------------
    @property
    def name(self) -> str:
        """The store's name (queries address it by this)."""
        return self.manifest.name

    @property
    def partitions(self) -> range:
        """The changelog partitions this store holds."""
        return range(self.manifest.partitions)

    @property
    def metadata(self) -> StoreMetadata:
        """The metadata of the latest commit (position, offsets, commit record, sequence)."""
        with self._mutex:
            return self._metadata

    def wait_for_commit(
        self, predicate: Callable[[StoreMetadata], bool], timeout_s: float
    ) -> StoreMetadata:
        """Wait until the latest commit's metadata satisfies ``predicate``, or ``timeout_s``.

        Woken by every commit of this handle (a follower's chunk, a sink's batch), so a
        reader can wait for the write it needs (``positionBound``) instead of polling.
        Returns the metadata it last checked: the caller tests the predicate again to tell
        success from a timeout. A closed store ends the wait at once.
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._committed:
            while not predicate(self._metadata) and self._db is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._committed.wait(remaining)
            return self._metadata

    @property
    def owner(self) -> OwnerInfo:
        """What this process wrote into ``_owner.json``."""
        return self._lock.info

    def update_owner(self, **changes: Any) -> OwnerInfo:
        """Rewrite ``_owner.json`` (e.g. ``flight_location="grpc://127.0.0.1:1234"``)."""
        self._check_open()
        return self._lock.update(**changes)

    @property
    def closed(self) -> bool:
        return self._db is None

    # -- transactions ---------------------------------------------------------------------
    def begin(self) -> Transaction:
        """Start a transaction (one at a time per store).

        Raises
        ------
        StoreRoleError
            If this handle is read-only.
        TransactionError
            If a transaction is already open.
        """
        self._check_writer()
        return self._begin()

    def _check_writer(self) -> None:
        if self.role is None:
            raise StoreRoleError(
                f"store {self.path} was opened read-only; open it with a StoreSpec of role "
                f"{self.manifest.role.value!r} to write",
                self.path,
            )

    def _check_no_transaction(self) -> None:
        """Under the mutex: refuse while a transaction is open."""
        if self._txn is not None:
            raise TransactionError(
                f"store {self.path} already has an open transaction ({self._txn.id}); "
                "commit or roll it back first",
                self.path,
            )

    def _begin(self) -> Transaction:
        db = self._check_open()
        with self._mutex:
            self._check_no_transaction()
            with self._gate:
                base = db.snapshot()
            self._txn = Transaction(_HandleView(self), base, self._metadata)
            return self._txn

    def _end_transaction(self, txn: Transaction, base: plyvel.Snapshot) -> None:
        with self._mutex:
            if self._txn is txn:
                self._txn = None
        self._gate.unless_closed(base.close)

    def _new_batch(self) -> plyvel.WriteBatch:
        return self._check_open().write_batch(sync=self.options.sync)

    def _commit_batch(
        self, batch: plyvel.WriteBatch, metadata: Mapping[bytes, bytes], new_meta: StoreMetadata
    ) -> None:
        self._check_open()
        for key, value in metadata.items():
            batch.put(key, value)
        try:
            with self._gate, self._mutex:
                batch.write()
                self._metadata = new_meta
                self._committed.notify_all()
        except BaseException as exc:
            # LevelDB may have logged the batch before failing (a failed sync), so the
            # commit is either all there or absent when the store is next opened: this
            # handle cannot tell, and nobody may read through it any more.
            error = self._failed_commit(new_meta.commit_seq, exc)
            if error is exc:
                raise
            raise error from exc

    def _commit_chunked(
        self, spill: SpillArea, metadata: Mapping[bytes, bytes], new_meta: StoreMetadata
    ) -> None:
        db = self._check_open()
        try:
            spill.seal()  # the redo file and its directory entries are durable
            crash_point("redo.sealed")
            marker = RedoMarker.for_metadata(spill.relpath, metadata)
            # From the marker's write on, the redo file belongs to the store: once the marker
            # is durable only the next open may remove it, after completing the commit.
            spill.hand_over()
            with self._gate:
                with self._mutex:
                    # Readers keep the last committed state until the redo file is applied.
                    pinned = self._pinned = _PinnedSnapshot(db.snapshot(), self._metadata)
                    db.put(META_REDO, marker.to_json(), sync=True)
                crash_point("redo.marked")
                apply_redo(
                    db, self.path, marker, self.options.chunk_bytes, self.options.sync, spill
                )
        except BaseException as exc:
            # Part of the transaction may be in the database: nobody may read it until a
            # reopen completes the commit from the redo marker.
            error = self._failed_commit(new_meta.commit_seq, exc)
            if error is exc:
                raise
            raise error from exc
        with self._mutex:
            self._metadata = new_meta
            self._pinned = None
            pinned.release()
            self._committed.notify_all()

    def _failed_commit(self, seq: int, exc: BaseException) -> BaseException:
        """Close this handle after commit ``seq`` failed; the error to raise for ``exc``."""
        _log.error(
            "store %s: commit %d failed (%s: %s); closing the store handle",
            self.path,
            seq,
            type(exc).__name__,
            exc,
        )
        self.close()
        if not isinstance(exc, (StoreError, OSError)):
            return exc  # MemoryError, KeyboardInterrupt, ...: the cause itself
        cls = StoreIOError if isinstance(exc, OSError) else type(exc)
        # A store error translated from LevelDB's or the disk's: name the original cause.
        cause = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ else exc
        return cls(
            f"store {self.path}: commit {seq} failed ({cause}); the store handle is closed. "
            "The commit is either all there or not at all when the store is next opened "
            "(an interrupted chunked commit is completed then): fix the cause (free space, "
            "permissions) and open the store again",
            self.path,
        )

    # -- reads ----------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """A consistent read view of the latest commit (see :class:`Snapshot`)."""
        db = self._check_open()
        with self._mutex:
            if self._pinned is not None:
                # A chunked commit is being applied: show the state before it.
                view = Snapshot(_HandleView(self), self._pinned.acquire(), self._pinned.metadata)
            else:
                with self._gate:
                    base = db.snapshot()
                view = Snapshot(_HandleView(self), base, self._metadata)
            self._snapshots.add(view)
            return view

    def _release_snapshot(self, view: Snapshot, snapshot: plyvel.Snapshot) -> None:
        with self._mutex:
            self._snapshots.discard(view)
            self._gate.unless_closed(snapshot.close)

    def get(self, key: bytes) -> bytes | None:
        """The committed value of ``key`` (raises as :meth:`Snapshot.get` does).

        Reads the database itself, not a snapshot of it: under the handle's lock no commit
        is half-way into the database, except a chunked one, which pins the state before it
        for readers (this one too).
        """
        self._check_open()
        with self._mutex:
            if self._pinned is None:
                try:
                    return self._value(key, DATA_PREFIX)
                except Exception as exc:  # closed meanwhile, or LevelDB's or the envelope's
                    closed = self._closed_error() if self._db is None else None
                    raise_read_error(key, exc, self.path, closed)
        with self.snapshot() as snapshot:
            return snapshot.get(key)

    def query(
        self, request: StateQueryRequest, *, max_result_bytes: int | None = None
    ) -> StateQueryResult[Any]:
        """Execute an IQv2 request against one snapshot of this store.

        Failures (bounds not reached, partitions not held, unknown query types, store
        errors) come back as failed :class:`~spark_statestore.query.QueryResult` objects, not
        as exceptions.

        Parameters
        ----------
        request
            The request.
        max_result_bytes
            A range, prefix or scan query whose rows would hold more bytes than this (keys
            and values, :data:`~spark_statestore.store.queries.ROW_BYTES` more per row) is
            stopped there and answered ``STORE_EXCEPTION`` on every partition asked, saying
            to read in pages (a store server sets it: no reply outgrows it). None: no cap.
        """
        from spark_statestore.store.queries import execute

        return execute(self, request, max_result_bytes=max_result_bytes)

    # -- closing --------------------------------------------------------------------------
    def commit_deferred(self, commit: DeferredCommit) -> None:
        """Commit the records of ``commit.files`` with its position and commit record: durable
        when this returns, applied later (see :mod:`spark_statestore.store.deferred`): when this
        handle closes, at its next commit, or by the next open of the store.

        Raises
        ------
        StoreRoleError
            If this handle is read-only.
        TransactionError
            If a transaction is open.
        """
        self._check_writer()
        self.apply_pending()  # one promise at a time
        db = self._check_open()
        with self._mutex:
            self._check_no_transaction()
            with self._gate:
                db.put(META_PENDING, commit.to_json(), sync=True)
            self._pending = commit
        crash_point("store.deferred")

    @property
    def pending_commit(self) -> CommitRecord | None:
        """The commit record of a deferred commit this handle has not applied yet, or None."""
        with self._mutex:
            return None if self._pending is None else self._pending.commit_record

    def apply_pending(self) -> None:
        """Apply the deferred commit, if one is pending: its records, position and commit
        record in one transaction, then drop its marker.

        Raises
        ------
        StoreCorruptedError
            One of its files is missing or unreadable (the marker stays: the commit is not
            lost, and the next open tries again).
        """
        with self._mutex:
            pending = self._pending
        if pending is None:
            return
        crash_point("store.deferred_apply")
        if not pending.applied_in(self.metadata.commit_record):
            with self._begin() as txn:
                for records in record_columns_of(self.path, pending):
                    txn.put_records(records)
                if pending.position is not None:
                    txn.merge_position(pending.position)
                if pending.coordinates is not None:
                    for partition, end in pending.commit_record.changelog_end_offsets.items():
                        txn.set_changelog_offset(partition, end)
                txn.set_commit_record(pending.commit_record)
                txn.commit()
            crash_point("store.deferred_applied")
        db = self._check_open()
        with self._mutex:
            # Not synced: a marker whose commit the store has is only removed by the next open.
            with self._gate:
                db.delete(META_PENDING)
            self._pending = None
        if self.options.sync:
            # The commit is durable: its files are needed no more (a writer that does not
            # sync leaves them to its own cleanup: its commit may not outlive a power loss).
            _remove_quietly(self.path, pending)

    def close(self) -> None:
        """Close every snapshot, the database, and give up ownership (idempotent).

        Safe while other threads read: new reads fail with :class:`StoreClosedError`, and
        the database is closed once the LevelDB calls in flight (a lookup, one chunk of a
        scan, a commit) have returned.
        """
        lock = self.close_database()
        if lock is not None:
            lock.release()

    def _apply_before_closing(self) -> None:
        """Apply a pending deferred commit; if that fails, the next open applies it."""
        if self._db is None:
            return
        try:
            self.apply_pending()
        except Exception as exc:
            _log.warning(
                "store %s: a committed batch could not be applied before closing (%s); the "
                "next open of the store applies it",
                self.path,
                exc,
            )

    def close_in_background(self) -> None:
        """Close as :meth:`close` does, on a thread of its own, after moving LevelDB's
        memtable into a table; return at once.

        For a writer that opens the store once per commit (the sink's commit process): a
        store closed with a full memtable makes its next open replay the log and build the
        table then (about 0.1 s per 100,000 changes, on the next commit's critical path);
        here that work overlaps with whatever the caller does next. The store stays owned by
        this process until the thread is done, marked as closing: an :meth:`open` of it
        meanwhile, in this process or another, waits for the close. A process that exits
        meanwhile leaves a consistent store (LevelDB recovers its log on the next open, as
        after a crash).
        """
        with self._mutex:
            if self._db is not None:
                # Whoever wants the store meanwhile waits for it (OwnerLock.acquire).
                self._lock.update(closing=True)
        thread = threading.Thread(target=self._close_flushed, name=f"close {self.path}")
        with _BACKGROUND_CLOSE_MUTEX:
            _BACKGROUND_CLOSES[self.path] = thread
        thread.start()

    def _close_flushed(self) -> None:
        try:
            crash_point("store.background_close")
            self._apply_before_closing()  # before the flush, so the flush takes it too
            db = self._db
            if db is not None:
                try:
                    with self._gate:
                        db.compact_range(start=b"\xff", stop=b"\xff")
                except Exception as exc:  # the close below still runs
                    _log.info("store %s: memtable not flushed at close (%s)", self.path, exc)
            self.close()
        except Exception as exc:
            _log.warning("store %s: closing it in the background failed: %s", self.path, exc)
        finally:
            with _BACKGROUND_CLOSE_MUTEX:
                if _BACKGROUND_CLOSES.get(self.path) is threading.current_thread():
                    del _BACKGROUND_CLOSES[self.path]

    def close_database(self) -> OwnerLock | None:
        """Close as :meth:`close` does but keep ownership: the database files are then at
        rest and nobody else may write them until the caller releases the returned lock
        (None when the handle was closed already). Checkpoints copy the files so. A
        deferred commit pending is applied first."""
        self._apply_before_closing()
        with self._mutex:
            db, self._db = self._db, None
            if db is None:
                return None
            self._committed.notify_all()
            txn = self._txn
            views = list(self._snapshots)
        try:
            self._gate.close()
            if txn is not None:
                txn.abandon()
            for view in views:
                view.detach()
            durable = self._unsynced and _flush(db, self.path)
            db.close()
            if durable:
                clear_unsynced(self.path)
        except BaseException:
            self._lock.release()
            raise
        return self._lock

    def _check_open(self) -> plyvel.DB:
        db = self._db
        if db is None:
            raise self._closed_error()
        return db

    def _closed_error(self) -> StoreClosedError:
        return StoreClosedError(f"store {self.path} is closed; open it again", self.path)

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._db is None else f"commit {self._metadata.commit_seq}"
        return f"Store({self.path!r}, {self.manifest.role.value}, {state})"


class _HandleView:
    """The handle as its snapshots and transactions see it
    (:mod:`~spark_statestore.store.protocols`): what they need of it by public names, so they
    do not import it. One per child: it refers to the handle, the handle not to it."""

    __slots__ = ("_store", "gate", "manifest", "options", "path")

    def __init__(self, store: Store) -> None:
        self._store = store
        self.path = store.path
        self.manifest = store.manifest
        self.options = store.options
        self.gate = store._gate

    @property
    def closed(self) -> bool:
        return self._store.closed

    def release_snapshot(self, view: Snapshot, snapshot: plyvel.Snapshot) -> None:
        self._store._release_snapshot(view, snapshot)

    def new_batch(self) -> plyvel.WriteBatch:
        return self._store._new_batch()

    def commit_batch(
        self, batch: plyvel.WriteBatch, metadata: Mapping[bytes, bytes], new_meta: StoreMetadata
    ) -> None:
        self._store._commit_batch(batch, metadata, new_meta)

    def commit_chunked(
        self, spill: SpillArea, metadata: Mapping[bytes, bytes], new_meta: StoreMetadata
    ) -> None:
        self._store._commit_chunked(spill, metadata, new_meta)

    def end_transaction(self, txn: Transaction, base: plyvel.Snapshot) -> None:
        self._store._end_transaction(txn, base)


class _PinnedSnapshot:
    """The snapshot readers get while a chunked commit is applied, shared and ref-counted:
    the LevelDB snapshot is released when the commit and every reader are done with it."""

    def __init__(self, snapshot: plyvel.Snapshot, metadata: StoreMetadata) -> None:
        self.snapshot = snapshot
        self.metadata = metadata
        self._refs = 1  # the committing transaction's

    def acquire(self) -> plyvel.Snapshot:
        self._refs += 1
        return _Lease(self)

    def release(self) -> None:
        self._refs -= 1
        if self._refs == 0:
            self.snapshot.close()


class _Lease:
    """One reader's hold on a :class:`_PinnedSnapshot` (quacks like a plyvel snapshot)."""

    def __init__(self, pinned: _PinnedSnapshot) -> None:
        self._pinned: _PinnedSnapshot | None = pinned
        self.get = pinned.snapshot.get
        self.iterator = pinned.snapshot.iterator
        if hasattr(pinned.snapshot, "get_value"):  # the extension's point reads
            self.get_value = pinned.snapshot.get_value
            self.get_record = pinned.snapshot.get_record

    def close(self) -> None:
        pinned, self._pinned = self._pinned, None
        if pinned is not None:
            pinned.release()


# -- opening helpers ----------------------------------------------------------------------
_BACKGROUND_CLOSE_MUTEX = threading.Lock()
_BACKGROUND_CLOSES: dict[str, threading.Thread] = {}
"""Stores of this process being closed by :meth:`Store.close_in_background`, by path."""


def _await_background_close(path: str) -> None:
    """Wait until this process's background close of the store at ``path`` (if any) ends."""
    with _BACKGROUND_CLOSE_MUTEX:
        thread = _BACKGROUND_CLOSES.get(path)
    if thread is not None and thread is not threading.current_thread():
        thread.join()


def _open_leveldb(plyvel: Any, db_path: str, create: bool, options: StoreOptions) -> plyvel.DB:
    try:
        return plyvel.DB(db_path, create_if_missing=create, **options.leveldb_options())
    except plyvel.CorruptionError as exc:
        raise StoreCorruptedError(
            f"store {os.path.dirname(db_path)}: LevelDB reports corruption ({exc}); "
            f"{RECOVERY_HINT}",
            os.path.dirname(db_path),
        ) from exc
    except plyvel.IOError as exc:
        path = os.path.dirname(db_path)
        if "lock" in str(exc).lower():
            # Our own flock is held, so this is a program outside the ownership protocol.
            raise StoreLockedError(
                f"store {path}: its LevelDB is locked by a program that does not use "
                f"spark-statestore's ownership (_owner.json); stop it ({exc})",
                path,
            ) from exc
        raise StoreError(f"store {path}: LevelDB cannot open {db_path}: {exc}", path) from exc
    except plyvel.Error as exc:
        path = os.path.dirname(db_path)
        if not create and "does not exist" in str(exc):
            raise StoreNotFoundError(f"no store at {path}: {exc}", path) from exc
        raise StoreError(f"store {path}: LevelDB cannot open {db_path}: {exc}", path) from exc


def _load_or_create_manifest(db: plyvel.DB, path: str, spec: StoreSpec | None) -> StoreManifest:
    raw = db.get(META_MANIFEST)
    if raw is not None:
        return StoreManifest.from_json(raw, path)
    has_data = False
    with db.iterator(include_value=False) as it:
        for _ in it:
            has_data = True
            break
    if has_data:
        raise StoreCorruptedError(
            f"store {path}: the database has data but no manifest: it is corrupted or not a "
            f"spark-statestore store; {RECOVERY_HINT}",
            path,
        )
    if spec is None:
        raise StoreNotFoundError(f"no store at {path}: the database is empty", path)
    manifest = StoreManifest(
        format_version=(
            KEY_VALUE_FORMAT_VERSION
            if spec.history_retention_ms is None
            else VERSIONED_FORMAT_VERSION
        ),
        role=spec.role,
        changelog_topic=spec.changelog_topic,
        partitions=spec.partitions,
        name=spec.name or os.path.basename(path),
        store_id=uuid.uuid4().hex,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        held_partitions=spec.held_partitions,
        key_prefix=spec.key_prefix,
        history_retention_ms=spec.history_retention_ms,
    )
    db.put(META_MANIFEST, manifest.to_json(), sync=True)
    return manifest


def _check_spec(path: str, manifest: StoreManifest, spec: StoreSpec | None) -> None:
    if spec is None:
        return
    if spec.role is not manifest.role:
        if manifest.role is Role.FOLLOWER:
            what = (
                f"a follower store of changelog {manifest.changelog_topic!r}: a sink (leader) "
                "cannot write into it"
            )
        else:
            what = (
                f"a leader store (written by a sink, changelog {manifest.changelog_topic!r}): "
                "a follower cannot follow a changelog into it"
            )
        raise StoreRoleError(f"store {path} is {what}; use another path", path)
    if spec.changelog_topic != manifest.changelog_topic:
        raise StoreMismatchError(
            f"store {path} belongs to changelog topic {manifest.changelog_topic!r}, not "
            f"{spec.changelog_topic!r}; use another path, or {RECOVERY_HINT}",
            path,
        )
    if spec.partitions != manifest.partitions:
        raise StoreMismatchError(
            f"store {path} has {manifest.partitions} partitions but changelog "
            f"{spec.changelog_topic!r} has {spec.partitions}; partitions cannot change under "
            f"a store: {RECOVERY_HINT}",
            path,
        )
    if (spec.held_partitions, spec.key_prefix) != (manifest.held_partitions, manifest.key_prefix):
        raise StoreMismatchError(
            f"store {path} holds {_describe_subset(manifest.held_partitions, manifest.key_prefix)}"
            f" of {manifest.changelog_topic!r}, not "
            f"{_describe_subset(spec.held_partitions, spec.key_prefix)}; a store's subset "
            "cannot change: use another path, or delete the store and follow again",
            path,
        )
    if spec.history_retention_ms != manifest.history_retention_ms:
        raise StoreMismatchError(
            f"store {path} is {_describe_kind(manifest.history_retention_ms)}, not "
            f"{_describe_kind(spec.history_retention_ms)}; a store's kind and history "
            "retention cannot change: use another path, or delete the store and follow again",
            path,
        )
    if spec.name is not None and spec.name != manifest.name:
        raise StoreMismatchError(
            f"store {path} is named {manifest.name!r}, not {spec.name!r}; use another path",
            path,
        )


def _describe_kind(retention_ms: int | None) -> str:
    if retention_ms is None:
        return "a key-value store"
    return f"a versioned store with a history retention of {retention_ms} ms"


def _describe_subset(partitions: tuple[int, ...] | None, prefix: bytes | None) -> str:
    what = "all partitions" if partitions is None else f"partitions {list(partitions)}"
    return what if prefix is None else f"{what}, keys starting with {prefix!r}"


def _recover(db: plyvel.DB, path: str, options: StoreOptions) -> None:
    raw = db.get(META_REDO)
    if raw is not None:
        marker = RedoMarker.from_json(raw, path)
        _log.warning("store %s: completing an interrupted chunked commit", path)
        apply_redo(db, path, marker, options.chunk_bytes, sync=True)
    for removed in remove_stray_redo(path):
        _log.info("store %s: removed the redo file %s of an uncommitted transaction", path, removed)
    remove_stale_checkpoints(path)  # their hard links would keep deleted tables on disk


def _flush(db: plyvel.DB, path: str) -> bool:
    """Make a ``sync=False`` writer's unsynced writes durable: LevelDB moves its memtables into
    synced tables when asked to compact a range (here one that holds no key, so nothing
    else is compacted). False when LevelDB refuses (after a failed write)."""
    try:
        db.compact_range(start=b"\xff", stop=b"\xff")
    except Exception as exc:
        _log.warning("store %s: its unsynced writes could not be made durable (%s)", path, exc)
        return False
    return True


def _read_metadata(db: plyvel.DB | plyvel.Snapshot, path: str) -> StoreMetadata:
    raw_commit = db.get(META_COMMIT)
    return StoreMetadata(
        position=decode_position(db.get(META_POSITION), path),
        changelog_offsets=decode_offsets(db.get(META_OFFSETS), path),
        commit_record=None if raw_commit is None else CommitRecord.from_json(raw_commit, path),
        commit_seq=decode_seq(db.get(META_SEQ), path),
        store_wide=db.get(META_STORE_WIDE) is not None,
    )


def _remove_quietly(path: str, commit: DeferredCommit) -> None:
    """Remove an applied deferred commit's files (those already gone are fine)."""
    for name in commit.paths:
        try:
            os.unlink(os.path.join(path, name))
        except FileNotFoundError:
            pass
        except OSError as exc:
            _log.warning("store %s: could not remove the applied file %s: %s", path, name, exc)
