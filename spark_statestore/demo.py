"""The end-to-end demo behind the README's first command (``make demo``).

1. Start the embedded Kafka broker in its own process (``spark-statestore broker``).
2. Play "another application": a Kafka Streams-style app ``shop`` with a store
   ``inventory-store`` reads orders and writes its changelog
   ``shop-inventory-store-changelog`` in Kafka transactions: murmur2-partitioned records with
   ``v``/``c`` position headers (padded like Kafka Streams pads them), updates, a tombstone and
   one aborted transaction.
3. Read the changelog back from a *separate process* (``spark-statestore tail``) with
   read_committed and print every record with its decoded position.
4. Check what the reader saw, stop every process started here, exit 0.

Kafka clients are imported inside :func:`run_demo`, never at module import.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from spark_statestore.changelog import partition_for_key, position_headers
from spark_statestore.changelog.headers import encode_position
from spark_statestore.position import Position

__all__ = ["run_demo"]

APP_ID = "shop"
STORE = "inventory-store"
INPUT_TOPIC = "orders"
CHANGELOG = f"{APP_ID}-{STORE}-changelog"
PARTITIONS = 4
ABORTED_MARKER = b"ABORTED-NEVER-VISIBLE"


def _banner(text: str) -> None:
    print(f"\n=== {text}", flush=True)


@contextmanager
def _broker_process(workdir: Path) -> Iterator[str]:
    """Run ``spark-statestore broker`` as a child; yields its bootstrap servers."""
    cmd = [
        sys.executable,
        "-m",
        "spark_statestore.cli",
        "broker",
        "--brokers",
        "3",
        "--topic",
        f"{INPUT_TOPIC}:{PARTITIONS}",
        "--topic",
        f"{CHANGELOG}:{PARTITIONS}",
        "--bootstrap-file",
        str(workdir / "bootstrap.servers"),
    ]
    log_file = (workdir / "broker.log").open("w")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        if not first.startswith("bootstrap.servers="):
            raise RuntimeError(
                f"the broker process did not start (said {first!r}); see {workdir / 'broker.log'}"
            )
        yield first.split("=", 1)[1]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log_file.close()


def _produce_orders(bootstrap: str) -> list[tuple[bytes, int, int, int]]:
    """Write input orders (item -> quantity); returns (item, qty, partition, offset) in order."""
    from confluent_kafka import KafkaError, Message, Producer

    orders = [(b"apple", 3), (b"pear", 5), (b"plum", 2), (b"apple", 4), (b"fig", 7), (b"pear", -5)]
    orders += [(b"kiwi", 1), (b"plum", 6)]
    offsets: dict[int, int] = {}
    failures: list[str] = []

    def on_delivery(index: int) -> Callable[[KafkaError | None, Message], None]:
        def report(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                failures.append(err.str())
            else:
                offsets[index] = msg.offset() or 0

        return report

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for index, (item, qty) in enumerate(orders):
        producer.produce(
            INPUT_TOPIC,
            key=item,
            value=str(qty).encode(),
            partition=partition_for_key(item, PARTITIONS),
            on_delivery=on_delivery(index),
        )
    producer.flush(30)
    if failures or len(offsets) != len(orders):
        raise RuntimeError(f"orders were not delivered: {failures or 'timeout'}")
    return [
        (item, qty, partition_for_key(item, PARTITIONS), offsets[index])
        for index, (item, qty) in enumerate(orders)
    ]


def _write_changelog(bootstrap: str, orders: list[tuple[bytes, int, int, int]]) -> None:
    """Act as the Kafka Streams app: fold orders into inventory, log every change."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{APP_ID}-0_0", "linger.ms": 5}
    )
    producer.init_transactions(30)
    inventory: dict[bytes, int] = {}
    positions: dict[int, Position] = {}

    def log_change(item: bytes, value: bytes | None, partition: int, offset: int) -> None:
        # Kafka Streams tags each change with the store's position: the input offsets seen.
        positions[partition] = positions.get(partition, Position.empty()).with_offset(
            INPUT_TOPIC, partition, offset
        )
        # Kafka Streams over-allocates the c header and sends trailing zeros: do the same.
        headers: list[tuple[str, str | bytes | None]] = [
            ("v", b"\x00"),
            ("c", encode_position(positions[partition], pad_like_kafka_streams=True)),
        ]
        producer.produce(
            CHANGELOG,
            key=item,
            value=value,
            partition=partition_for_key(item, PARTITIONS),
            headers=headers,
        )

    batches = [orders[:4], orders[4:6], orders[6:]]
    for number, batch in enumerate(batches, start=1):
        producer.begin_transaction()
        for item, qty, partition, offset in batch:
            inventory[item] = inventory.get(item, 0) + qty
            if inventory[item] == 0:
                del inventory[item]
                log_change(item, None, partition, offset)  # tombstone
            else:
                log_change(item, str(inventory[item]).encode(), partition, offset)
        producer.commit_transaction(30)
        print(f"  committed transaction {number}: {len(batch)} change(s)", flush=True)
        if number == 2:
            producer.begin_transaction()
            producer.produce(
                CHANGELOG,
                key=b"apple",
                value=ABORTED_MARKER,
                partition=partition_for_key(b"apple", PARTITIONS),
                headers=list(position_headers(Position.from_map({INPUT_TOPIC: {0: 999}}))),
            )
            producer.flush(30)  # the aborted record really lands in the log...
            producer.abort_transaction(30)  # ...and is then aborted
            print("  aborted a transaction (apple=ABORTED-NEVER-VISIBLE)", flush=True)
    # A record from an older app version: no headers at all (no position, not an error).
    producer.begin_transaction()
    producer.produce(
        CHANGELOG, key=b"legacy", value=b"1", partition=partition_for_key(b"legacy", PARTITIONS)
    )
    producer.commit_transaction(30)
    print("  committed a record without position headers (older Kafka Streams)", flush=True)
    expected = ", ".join(f"{k.decode()}={v}" for k, v in sorted(inventory.items()))
    print(f"  the app's store now holds: {expected}, legacy=1", flush=True)


def run_demo(workdir: Path | None = None) -> int:
    """Run the demo; returns the process exit code (0 when everything checked out)."""
    own_dir = workdir is None
    root = Path(tempfile.mkdtemp(prefix="spark-statestore-demo-")) if workdir is None else workdir
    root.mkdir(parents=True, exist_ok=True)
    try:
        _banner("1. starting the embedded Kafka broker (a separate process)")
        with _broker_process(root) as bootstrap:
            print(f"  bootstrap.servers = {bootstrap}", flush=True)
            print(f"  topics: {INPUT_TOPIC} ({PARTITIONS} partitions), {CHANGELOG}", flush=True)

            _banner(f"2. another application ({APP_ID!r}) writes its changelog in transactions")
            orders = _produce_orders(bootstrap)
            print(f"  produced {len(orders)} orders to {INPUT_TOPIC}", flush=True)
            _write_changelog(bootstrap, orders)

            _banner("3. a separate process reads the changelog back (read_committed)")
            reader = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "spark_statestore.cli",
                    "tail",
                    "--bootstrap-servers",
                    bootstrap,
                    "--changelog",
                    CHANGELOG,
                ],
                capture_output=True,
                text=True,
                timeout=120,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
            print(reader.stdout, end="", flush=True)
            if reader.returncode != 0:
                print(reader.stderr, file=sys.stderr)
                print("demo FAILED: the reader process failed", file=sys.stderr)
                return 1
            print(f"  ({reader.stderr.strip()})", flush=True)

        _banner("4. what to look at")
        lines = reader.stdout.splitlines()
        problems = []
        if any(ABORTED_MARKER.decode() in line for line in lines):
            problems.append("an aborted record reached the reader")
        if not any(" delete " in line for line in lines):
            problems.append("the tombstone is missing")
        if not any("position={" in line for line in lines):
            problems.append("no record carried a decoded position")
        print("  - every record shows where it lives: changelog[partition]@offset", flush=True)
        print("  - 'delete' rows are tombstones (null value): pear went back to 0", flush=True)
        print(
            '  - position={"orders":{...}} is the decoded c header: the input offsets the app '
            "had processed when it logged the change",
            flush=True,
        )
        print("  - the aborted transaction (apple=ABORTED-NEVER-VISIBLE) is not there", flush=True)
        print("  - offsets have gaps: transaction markers occupy offsets too", flush=True)
        print("  - the broker process was stopped; nothing is left running", flush=True)
        if problems:
            print(f"demo FAILED: {'; '.join(problems)}", file=sys.stderr)
            return 1
        print("\ndemo OK", flush=True)
        return 0
    finally:
        if own_dir:
            shutil.rmtree(root, ignore_errors=True)
