"""A store written with ``sync=False`` is refused after a power cut instead of answering from
whatever part of its unsynced writes reached the disk (wrong answers before).

A power cut is a reboot: the test stands in for it by giving the store's record another
boot id, exactly what a machine that went down and came back shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_statestore.store import Role, Store, StoreCorruptedError, StoreOptions, StoreSpec
from spark_statestore.store.unsynced import UNSYNCED_FILE, boot_id

SPEC = StoreSpec(Role.FOLLOWER, "unsynced-changelog", 2)
FAST = StoreOptions(sync=False)

pytestmark = pytest.mark.skipif(boot_id() is None, reason="this system has no boot id")


def _write(path: Path, options: StoreOptions, value: bytes = b"1") -> Store:
    store = Store.open(path, SPEC, options=options)
    with store.begin() as txn:
        txn.put(b"k", value)
    return store


def _reboot(path: Path) -> None:
    record = path / UNSYNCED_FILE
    data = json.loads(record.read_text())
    data["boot_id"] = "00000000-0000-0000-0000-000000000000"
    record.write_text(json.dumps(data))


def test_a_sync_false_writer_is_recorded_until_a_clean_close(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = _write(path, FAST)
    assert json.loads((path / UNSYNCED_FILE).read_text())["boot_id"] == boot_id()
    store.close()
    assert not (path / UNSYNCED_FILE).exists()
    _write(path, StoreOptions()).close()  # sync=True writers leave no record
    assert not (path / UNSYNCED_FILE).exists()


def _die_with_unsynced_writes(path: Path) -> None:
    child = (
        "import os, sys\n"
        "from spark_statestore.store import Role, Store, StoreOptions, StoreSpec\n"
        "spec = StoreSpec(Role.FOLLOWER, 'unsynced-changelog', 2)\n"
        "store = Store.open(sys.argv[1], spec, options=StoreOptions(sync=False))\n"
        "with store.begin() as txn:\n"
        "    txn.put(b'k', b'2')\n"
        "os._exit(9)\n"  # no close: the writes stay unsynced in the page cache
    )
    result = subprocess.run([sys.executable, "-c", child, str(path)], timeout=60)
    assert result.returncode == 9


def test_a_store_with_unsynced_writes_is_refused_after_a_reboot(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _die_with_unsynced_writes(path)
    _reboot(path)
    for spec in (SPEC, None):
        with pytest.raises(StoreCorruptedError, match="sync=False when the machine went down"):
            Store.open(path, spec)


def test_after_a_process_crash_the_next_open_makes_the_writes_durable(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _die_with_unsynced_writes(path)  # the same boot: the kernel kept every write
    with Store.open(path, SPEC) as store:
        assert store.get(b"k") == b"2"
    # The record is gone once the writes are in synced tables: a later reboot is harmless.
    assert not (path / UNSYNCED_FILE).exists()
    assert os.listdir(path)
