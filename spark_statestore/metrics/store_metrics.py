"""A store's own metrics (:class:`StoreMetrics`), for any open store, whoever owns it (a
follower, a sink's store server): read when Prometheus scrapes.

=========================================  =====  ==============================================
metric                                     type   meaning (Kafka Streams' counterpart)
=========================================  =====  ==============================================
``spark_statestore_store_size_bytes``      gauge  bytes of the store's files on disk: LevelDB's
                                                  and the store's metadata files (RocksDB's
                                                  ``total-sst-files-size``); measured at most
                                                  every ``size_ttl_s`` seconds
``spark_statestore_store_commit_seq``      gauge  the store's latest commit number
=========================================  =====  ==============================================

Every series has the label ``store`` (the store directory). The store's metadata records no
commit time (only the commit number, position, offsets and commit record), so there is no
commit-age metric here: an owner that knows when it committed reports that itself.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from spark_statestore.metrics.follower import PREFIX
from spark_statestore.store.store import DB_DIR

if TYPE_CHECKING:
    from spark_statestore.store import Store

__all__ = ["SIZE_TTL_S", "StoreMetrics", "store_size_bytes"]

SIZE_TTL_S = 5.0
"""How old the size a scrape reports may be: walking a large store's directory costs a
``stat`` per table file, so it is not redone at every scrape."""
_NOT_COUNTED = ".log"
"""Top-level files that are not the store's (the sink's store server's log)."""


def store_size_bytes(path: str) -> int:
    """Bytes of the store at ``path`` on disk: every file under its LevelDB directory and
    the files directly in its directory (the owner record, markers), but not what lives
    beside the store there: the staging area (rows not committed yet), readers' checkpoints
    (hard links to the same table files) and logs. A file LevelDB deletes meanwhile (a
    compaction) is not counted."""
    total = _tree_bytes(os.path.join(path, DB_DIR))
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if not entry.name.endswith(_NOT_COUNTED):
                    total += _file_bytes(entry)
    except OSError:
        pass  # the directory is gone: only what was counted
    return total


def _tree_bytes(path: str) -> int:
    total = 0
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    total += _tree_bytes(entry.path)
                else:
                    total += _file_bytes(entry)
    except OSError:
        pass
    return total


def _file_bytes(entry: os.DirEntry[str]) -> int:
    try:
        if entry.is_file(follow_symlinks=False):
            return entry.stat(follow_symlinks=False).st_size
    except OSError:
        pass  # deleted since it was listed
    return 0


class StoreMetrics(Collector):
    """The metrics of one open store, registered in ``registry``.

    Parameters
    ----------
    store
        The store (its owner keeps it open; a closed store reports its last commit).
    registry
        Where to register.
    size_ttl_s
        How old the reported size may be.
    """

    def __init__(
        self, store: Store, registry: CollectorRegistry, *, size_ttl_s: float = SIZE_TTL_S
    ) -> None:
        self._store = store
        self._label = str(store.path)
        self._ttl_s = size_ttl_s
        self._lock = threading.Lock()
        self._measured_at = float("-inf")
        self._size = 0
        registry.register(self)

    def collect(self) -> Iterator[Any]:
        """The store's metrics now (called by the registry at each scrape)."""
        size = GaugeMetricFamily(
            f"{PREFIX}store_size_bytes",
            "Bytes of the store's files on disk (LevelDB and the store's metadata files)",
            labels=["store"],
        )
        size.add_metric([self._label], self._size_now())
        yield size
        commit_seq = GaugeMetricFamily(
            f"{PREFIX}store_commit_seq", "The store's latest commit number", labels=["store"]
        )
        commit_seq.add_metric([self._label], self._store.metadata.commit_seq)
        yield commit_seq

    def _size_now(self) -> int:
        with self._lock:  # concurrent scrapes walk the directory once
            now = time.monotonic()
            if now - self._measured_at >= self._ttl_s:
                self._size = store_size_bytes(self._label)
                self._measured_at = time.monotonic()
            return self._size
