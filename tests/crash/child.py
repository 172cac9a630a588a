"""Crash-test child: commits the workload's transactions into a store until it is killed.

Usage: python -m tests.crash.child STORE_DIR SEED [CRASH_POINT [OCCURRENCE]]

Prints ``ready <last committed>`` once the store is open (recovery done), ``commit <i> <large>``
before each commit and ``done <i>`` after it. With CRASH_POINT, the store's redo fault hook
SIGKILLs this process the OCCURRENCE-th time the chunked commit reaches that point; if it
never does within four large transactions the child exits with status 3.
"""

from __future__ import annotations

import os
import signal
import sys

from spark_statestore.store import CommitRecord, Role, Store, StoreOptions, StoreSpec, crash
from tests.crash.workload import (
    BUDGET_BYTES,
    CHUNK_BYTES,
    LARGE_EVERY,
    PARTITIONS,
    QUERY_ID,
    transaction,
)


def main() -> None:
    path, seed = sys.argv[1], int(sys.argv[2])
    injected = len(sys.argv) > 3
    if injected:
        point = sys.argv[3]
        remaining = [int(sys.argv[4]) if len(sys.argv) > 4 else 1]

        def hook(name: str) -> None:
            if name == point:
                remaining[0] -= 1
                if remaining[0] == 0:
                    os.kill(os.getpid(), signal.SIGKILL)

        crash.hook = hook
    options = StoreOptions(uncommitted_max_bytes=BUDGET_BYTES, chunk_bytes=CHUNK_BYTES, sync=False)
    spec = StoreSpec(Role.FOLLOWER, "crash-changelog", PARTITIONS)
    store = Store.open(path, spec, purpose="crash test child", options=options)
    record = store.metadata.commit_record
    index = -1 if record is None else record.batch_id
    print(f"ready {index}", flush=True)
    while True:
        index += 1
        txn = transaction(seed, index)
        with store.begin() as tx:
            if index % 2:
                tx.put_all((k, v, p, o, -1) for k, v, p, o in txn.ops)
            else:
                for key, value, partition, offset in txn.ops:
                    if value is None:
                        tx.delete(key)
                    else:
                        tx.put(key, value, partition=partition, offset=offset)
            tx.record_source(*txn.source)
            tx.set_changelog_offset(*txn.changelog)
            tx.set_commit_record(CommitRecord(QUERY_ID, index))
            print(f"commit {index} {int(tx.spilled)}", flush=True)
        print(f"done {index}", flush=True)
        if injected and index >= 4 * LARGE_EVERY:
            print("the crash point was never reached", file=sys.stderr)
            sys.exit(3)


if __name__ == "__main__":
    main()
