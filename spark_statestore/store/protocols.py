"""What a store handle's children need of it: a snapshot (:class:`SnapshotOwner`) and a
transaction (:class:`TransactionOwner`).

The handle (:class:`~spark_statestore.store.Store`) gives each child a view of itself that
implements these, so :mod:`~spark_statestore.store.snapshot` and
:mod:`~spark_statestore.store.transaction` never import the handle that creates them. Each
protocol is generic in the child type (``SnapshotOwner[Snapshot]``), so this module does not
import the children either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    import plyvel

    from spark_statestore.store.gate import Gate
    from spark_statestore.store.manifest import StoreManifest, StoreMetadata
    from spark_statestore.store.redo import SpillArea
    from spark_statestore.store.spec import StoreOptions

__all__ = ["HandleView", "SnapshotOwner", "TransactionOwner"]

_Child = TypeVar("_Child", contravariant=True)


class HandleView(Protocol):
    """What every child reads of its handle."""

    @property
    def path(self) -> str: ...

    @property
    def manifest(self) -> StoreManifest: ...

    @property
    def gate(self) -> Gate: ...

    @property
    def closed(self) -> bool: ...


class SnapshotOwner(HandleView, Protocol[_Child]):
    """What a snapshot needs of its handle."""

    def release_snapshot(self, view: _Child, snapshot: plyvel.Snapshot) -> None:
        """Give ``view``'s LevelDB ``snapshot`` back (the view was closed)."""
        ...


class TransactionOwner(HandleView, Protocol[_Child]):
    """What a transaction needs of its handle."""

    @property
    def options(self) -> StoreOptions: ...

    def new_batch(self) -> plyvel.WriteBatch:
        """An empty write batch of the database (synced as the store's options say)."""
        ...

    def commit_batch(
        self, batch: plyvel.WriteBatch, metadata: Mapping[bytes, bytes], new_meta: StoreMetadata
    ) -> None:
        """Write ``batch`` with the commit's ``metadata`` keys atomically; the handle's latest
        commit is ``new_meta`` then."""
        ...

    def commit_chunked(
        self, spill: SpillArea, metadata: Mapping[bytes, bytes], new_meta: StoreMetadata
    ) -> None:
        """Commit the writes spilled to ``spill`` under a redo marker, with ``metadata``."""
        ...

    def end_transaction(self, txn: _Child, base: plyvel.Snapshot) -> None:
        """``txn`` is over: the handle may begin another; ``base`` is released."""
        ...
