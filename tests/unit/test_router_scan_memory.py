"""A routed scan of a large store in bounded memory: three replicas (one partition each)
served here, scanned by a child process whose peak memory is measured while it scans. The
rows must be exactly the stores', in key order, and the scanner's peak RSS must not grow
with the store: the same measurement of the unpaged routed scan (one IQv2 reply per
replica, merged in one list: what ``query --changelog`` did before) grows with it.

CI runs 200,000 keys; ``make soak`` runs 1,000,000."""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_statestore.changelog.partitioner import partitions_for_keys
from spark_statestore.discovery import ReplicaAnnouncement
from spark_statestore.serve import StoreServer
from spark_statestore.store import Role, Store, StoreSpec
from tests.conftest import REPO_ROOT

TOPIC = "big-changelog"
PARTITIONS = 3
TOKEN = "token-of-the-big-replicas"
MIB = 1024 * 1024

SCANNER = textwrap.dedent(
    """
    import hashlib, json, sys, time

    def rss(field):
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024

    config = json.load(sys.stdin)
    import spark_statestore
    from spark_statestore.discovery import (
        ReplicaAnnouncement, ReplicaSet, RoutedScan, Router, merged_rows,
    )
    from spark_statestore.query import RawScanQuery, StateQueryRequest

    view = ReplicaSet.of(
        config["changelog"],
        [ReplicaAnnouncement.from_dict(a) for a in config["announced"]],
        now_ms=int(time.time() * 1000),
    )
    router = Router(
        lambda: view, lambda r: spark_statestore.connect(r.location, token=config["token"])
    )
    request = StateQueryRequest.in_store(config["changelog"]).with_query(RawScanQuery.scan())
    with RoutedScan.open(router, request, limit=10) as warm:  # every import and connection
        list(warm.rows())
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # the peak (VmHWM) starts again from the RSS now
    base = rss("VmRSS")
    digest, rows = hashlib.sha256(), 0
    if config["paged"]:
        with RoutedScan.open(router, request, page_rows=config["page_rows"]) as scan:
            for key, value in scan.rows():
                digest.update(key)
                digest.update(value)
                rows += 1
    else:
        for key, value in merged_rows(router.query(request)):
            digest.update(key)
            digest.update(value)
            rows += 1
    print(json.dumps({"rows": rows, "digest": digest.hexdigest(), "growth": rss("VmHWM") - base}))
    """
)


class BigReplicas:
    """``keys`` rows over three follower stores of one partition each, served here."""

    def __init__(self, root: Path, keys: int, stack: contextlib.ExitStack, **server: Any) -> None:
        names = [b"key%08d" % i for i in range(keys)]
        parts = partitions_for_keys(pa.array(names, pa.binary()), PARTITIONS)
        self.stores: list[Store] = []
        self.announced: list[dict[str, Any]] = []
        for partition in range(PARTITIONS):
            spec = StoreSpec(Role.FOLLOWER, TOPIC, PARTITIONS, held_partitions=(partition,))
            store = stack.enter_context(Store.open(root / f"p{partition}", spec, purpose="t"))
            mine = [i for i, p in enumerate(parts) if p == partition]
            with store.begin() as txn:
                txn.put_columns(
                    [names[i] for i in mine],
                    [b"value-%024d" % i for i in mine],
                    [partition] * len(mine),
                    mine,
                    [0] * len(mine),
                )
            served = StoreServer(store, token=TOKEN, **server)
            location = served.start()
            stack.callback(served.close)
            announcement = ReplicaAnnouncement.of_store(store, location=location, ttl_ms=600_000)
            heartbeat = announcement.with_heartbeat(
                int(time.time() * 1000), position=store.metadata.position, lags={}
            )
            self.stores.append(store)
            self.announced.append(heartbeat.to_dict())

    def digest(self) -> tuple[int, str]:
        """The stores' rows merged in key order: their count and hash."""
        digest, rows = hashlib.sha256(), 0
        with contextlib.ExitStack() as stack:
            snapshots = [stack.enter_context(store.snapshot()) for store in self.stores]
            for key, value in heapq.merge(*(s.items() for s in snapshots)):
                digest.update(key)
                digest.update(value)
                rows += 1
        return rows, digest.hexdigest()

    def scan(self, *, paged: bool, page_rows: int = 4096) -> dict[str, Any]:
        """Scan in a child process: its rows' count and hash, and its peak RSS growth."""
        config = {"changelog": TOPIC, "announced": self.announced, "token": TOKEN}
        config.update(paged=paged, page_rows=page_rows)
        done = subprocess.run(
            [sys.executable, "-c", SCANNER],
            input=json.dumps(config),
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result


@pytest.fixture
def big(tmp_path: Path) -> Iterator[Any]:
    with contextlib.ExitStack() as stack:

        def factory(keys: int, **server: Any) -> BigReplicas:
            return BigReplicas(tmp_path, keys, stack, **server)

        yield factory


def test_a_routed_scan_of_200k_keys_in_bounded_memory(big: Any) -> None:
    """Pages of 1,024 rows: the scanner's peak grows by less than 40 MiB (about 20 MiB,
    most of it the allocator keeping freed pages); the unpaged scan's grows by more (about
    70 MiB: a server asked to answer whole, as before replies were capped)."""
    replicas = big(200_000, max_result_bytes=2**31 - 1)
    rows, digest = replicas.digest()
    assert rows == 200_000
    paged = replicas.scan(paged=True, page_rows=1024)
    assert (paged["rows"], paged["digest"]) == (rows, digest)
    assert paged["growth"] < 40 * MIB, paged["growth"] / MIB
    whole = replicas.scan(paged=False)
    assert (whole["rows"], whole["digest"]) == (rows, digest)
    assert whole["growth"] > 40 * MIB, whole["growth"] / MIB  # the measurement sees it


@pytest.mark.soak
def test_a_routed_scan_of_1m_keys_in_bounded_memory(big: Any) -> None:
    """The default pages (4,096 rows): about 40 MiB of growth for 1,000,000 keys, where the
    unpaged scan grew by about 340 MiB (and a server now refuses to answer it whole)."""
    replicas = big(1_000_000)
    rows, digest = replicas.digest()
    paged = replicas.scan(paged=True)
    assert (paged["rows"], paged["digest"]) == (rows, digest) and rows == 1_000_000
    assert paged["growth"] < 64 * MIB, paged["growth"] / MIB
