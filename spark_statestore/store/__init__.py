"""The LevelDB state store engine (docs/store.md).

One store is one directory holding one LevelDB database (all changelog partitions), owned by
one process at a time. Writers change it through :class:`Transaction` objects whose commits
are atomic together with the store's position, changelog offsets and commit record; readers
use :class:`Snapshot` views and IQv2 queries (:meth:`Store.query`).

Importing this package loads neither LevelDB nor Arrow; they load when a store is opened or
a snapshot is turned into Arrow batches.
"""

from spark_statestore.store.deferred import DeferredCommit
from spark_statestore.store.errors import (
    InvalidScanError,
    StoreClosedError,
    StoreCorruptedError,
    StoreError,
    StoreFormatError,
    StoreIOError,
    StoreLockedError,
    StoreMismatchError,
    StoreNotFoundError,
    StoreRoleError,
    TransactionError,
)
from spark_statestore.store.layout import StoredRecord
from spark_statestore.store.manifest import (
    FORMAT_VERSION,
    CommitRecord,
    Role,
    StoreManifest,
    StoreMetadata,
)
from spark_statestore.store.ownership import OwnerInfo, live_owner, read_owner
from spark_statestore.store.scan import ScanSpec, ScanStats, scan_batches
from spark_statestore.store.snapshot import Snapshot, arrow_schema
from spark_statestore.store.spec import DEFAULT_UNCOMMITTED_MAX_BYTES, StoreOptions, StoreSpec
from spark_statestore.store.store import Store
from spark_statestore.store.transaction import Transaction, TransactionState

__all__ = [
    "DEFAULT_UNCOMMITTED_MAX_BYTES",
    "FORMAT_VERSION",
    "CommitRecord",
    "DeferredCommit",
    "InvalidScanError",
    "OwnerInfo",
    "Role",
    "ScanSpec",
    "ScanStats",
    "Snapshot",
    "Store",
    "StoreClosedError",
    "StoreCorruptedError",
    "StoreError",
    "StoreFormatError",
    "StoreIOError",
    "StoreLockedError",
    "StoreManifest",
    "StoreMetadata",
    "StoreMismatchError",
    "StoreNotFoundError",
    "StoreOptions",
    "StoreRoleError",
    "StoreSpec",
    "StoredRecord",
    "Transaction",
    "TransactionError",
    "TransactionState",
    "arrow_schema",
    "live_owner",
    "read_owner",
    "scan_batches",
]
