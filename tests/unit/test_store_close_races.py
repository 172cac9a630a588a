"""Closing a store while other threads are inside LevelDB calls: never a crash, never a raw
plyvel error, only :class:`StoreClosedError` for the reads that come after the close.

plyvel releases the GIL inside LevelDB, so a close that freed the database under a read in
flight killed the process with SIGSEGV (25 of 30 runs of this test's child before the store
counted its calls in flight). The child runs in its own process so that a crash fails the
test instead of killing pytest.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import sys, threading
from spark_statestore.store import Role, Store, StoreClosedError, StoreSpec

root, rounds = sys.argv[1], int(sys.argv[2])
spec = StoreSpec(Role.FOLLOWER, "t-changelog", 2)
errors = []
for round_ in range(rounds):
    path = f"{root}/store-{round_}"
    with Store.open(path, spec) as store, store.begin() as txn:
        for i in range(5000):
            txn.put(b"k%06d" % i, b"v" * 64, offset=i)
    store = Store.open(path, spec)
    started = threading.Barrier(7)
    done = threading.Event()

    def read(kind):
        started.wait()
        try:
            while True:
                if kind == 0:
                    store.get(b"k000001")
                elif kind == 1:
                    with store.snapshot() as snap:
                        for _ in snap.items():
                            pass
                elif kind == 2:
                    with store.snapshot() as snap:
                        for _ in snap.to_batches(batch_rows=500):
                            pass
                elif kind == 3:
                    with store.snapshot() as snap:
                        snap.multi_get([b"k%06d" % i for i in range(0, 5000, 7)])
                elif kind == 4:
                    with store.snapshot() as snap:
                        for _ in snap.items(reverse=True, limit=100):
                            pass
                else:
                    from spark_statestore.store.scan import ScanSpec, scan_batches
                    with store.snapshot() as snap:
                        for _ in scan_batches(snap, ScanSpec()):
                            pass
        except StoreClosedError:
            return
        except BaseException as exc:
            errors.append(f"reader {kind}: {exc!r}")

    threads = [threading.Thread(target=read, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    started.wait()
    # Let the readers get into LevelDB at different depths before closing under them.
    for _ in range(round_ * 7 % 23):
        store.get(b"k000002")
    store.close()
    for t in threads:
        t.join()
if errors:
    print("\n".join(errors[:5]))
    sys.exit(3)
print("ok")
"""


def test_close_under_concurrent_reads_never_crashes(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path), "30"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (
        f"child exited {result.returncode} (-11 is SIGSEGV)\n{result.stdout}{result.stderr[-3000:]}"
    )
    assert result.stdout.strip() == "ok"
