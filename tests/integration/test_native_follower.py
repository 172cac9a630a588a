"""The fast path and the reference path follow the same real changelog into byte-equal
stores: records, tombstones, aborted transactions, headers besides the position headers,
malformed and unknown position headers (skipped, or failing naming the record), in chunks
smaller than the changelog."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import plyvel
import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, Producer

from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.changelog.position_codec import encode_position
from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
from spark_statestore.errors import StateStoreError
from spark_statestore.follower import Follower, FollowerState
from spark_statestore.native import ENV
from spark_statestore.position import Position
from spark_statestore.store import Role, Store, StoreOptions, StoreSpec
from tests.kafka_util import wait_until_readable
from tests.native_util import native_or_skip

native_or_skip()

pytestmark = pytest.mark.integration

PARTITIONS = 3


def position_header(partition: int, offset: int) -> bytes:
    return encode_position(
        Position.from_map({"orders": {partition: offset}}), pad_like_kafka_streams=True
    )


def produce(bootstrap: str, topic: str, *, bad: bool) -> None:
    """Transactions of every header case; ``bad`` adds a malformed ``c`` header."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"w-{topic}"})
    producer.init_transactions(30)
    ends: dict[int, int] = {}

    def delivered(error: Any, message: Any) -> None:
        if error is None:
            p = message.partition()
            ends[p] = max(ends.get(p, -1), message.offset())

    n = 0
    for txn in range(12):
        producer.begin_transaction()
        for i in range(40):
            n += 1
            p = n % PARTITIONS
            key = b"k%03d" % (n * 7 % 90)
            value = None if n % 9 == 0 else b"v%d-%d" % (txn, i)
            headers: list[tuple[str, bytes | None]] = [("v", b"\x00"), ("c", position_header(p, n))]
            if n % 11 == 0:  # a header-aware store's record: kept with it
                headers = [("trace", b"t%d" % n), *headers, ("empty", None)]
            if n % 17 == 0:
                headers = []  # no position at all
            if n % 23 == 0:
                headers = [("v", b"\x05"), ("c", b"future")]  # an unknown version: ignored
            if bad and n == 301:
                headers = [("v", b"\x00"), ("c", b"\x00\x00\x00\x00\x09")]  # truncated
            producer.produce(
                topic, key=key, value=value, partition=p, headers=headers, on_delivery=delivered
            )
        if txn % 5 == 4:
            # Delivered first: an abort racing its own sends was once refused as
            # INVALID_TXN_STATE by the broker.
            producer.flush(30)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    producer.flush(30)
    wait_until_readable(bootstrap, topic, ends)


def follow(
    bootstrap: str, topic: str, path: Path, on_missing: OnMissingPosition
) -> tuple[dict[bytes, bytes], dict[str, int]]:
    """Restore ``topic`` into a fresh store in chunks of 50; its raw LevelDB contents (data
    and metadata) and the follower's counters."""
    spec = StoreSpec(Role.FOLLOWER, topic, PARTITIONS)
    with Store.open(path, spec, options=StoreOptions(sync=False)) as store:
        source = KafkaChangelogSource(bootstrap, topic, on_missing_position=on_missing)
        follower = Follower(store, source, chunk_records=50)
        try:
            follower.start_restore()
            while follower.state is not FollowerState.RUNNING:
                follower.step()
            counters = {
                "applied": follower.records_applied,
                "without_position": follower.records_without_position,
            }
        finally:
            follower.stop()
    db = plyvel.DB(str(path / "db"))
    try:
        # All but the commit counter and the manifest (its store id and creation time).
        return {k: v for k, v in db.iterator() if k not in (b"m:seq", b"m:manifest")}, counters
    finally:
        db.close()


@pytest.mark.parametrize("bad", [False, True], ids=["well-formed", "a-malformed-header"])
def test_both_paths_follow_into_equal_stores(
    kafka_broker: Any,
    make_topic: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bad: bool,
) -> None:
    topic = make_topic(partitions=PARTITIONS, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    produce(bootstrap, topic, bad=bad)
    results = {}
    for mode in ("1", "0"):
        monkeypatch.setenv(ENV, mode)
        source = KafkaChangelogSource(bootstrap, topic)
        try:
            source.assign({0: 0})
            assert source.columnar is (mode == "1")
        finally:
            source.close()
        results[mode] = follow(bootstrap, topic, tmp_path / mode, OnMissingPosition.SKIP)
        if bad:
            with pytest.raises(StateStoreError) as failed:
                follow(bootstrap, topic, tmp_path / f"fail{mode}", OnMissingPosition.FAIL)
            results[f"error{mode}"] = str(failed.value)
    assert _diff(results["1"][0], results["0"][0]) == []
    assert results["1"] == results["0"]
    contents, counters = results["1"]
    assert counters["applied"] == 400  # 10 committed transactions of 40
    assert any(v[:1] == b"\x01" for k, v in contents.items() if k[:1] == b"d")  # kept headers
    if bad:
        assert results["error1"] == results["error0"]
        assert "offset" in results["error1"]


def _diff(a: dict[bytes, bytes], b: dict[bytes, bytes]) -> list[tuple[bytes, Any, Any]]:
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


@pytest.mark.parametrize(
    ("formats", "on_missing"),
    [
        ({"keyformat": "string", "valueformat": "string", "mode": "PERMISSIVE"}, "skip"),
        pytest.param({}, "fail", id="soak-binary", marks=pytest.mark.soak),
        pytest.param(
            {"valueformat": "long", "mode": "PERMISSIVE"},
            "skip",
            id="soak-long",
            marks=pytest.mark.soak,
        ),
    ],
)
def test_both_paths_convert_a_range_into_the_same_feed_batches(
    kafka_broker: Any,
    make_topic: Callable[..., str],
    spark: Any,
    formats: dict[str, str],
    on_missing: str,
) -> None:
    """The change feed's executors: the same offset ranges read as messages and as
    columns give equal Arrow batches (positions per record included), or the same error."""
    from pyspark.sql.types import StructType

    from spark_statestore.connectors.kafka.follower.ranges import read_range, read_range_columns
    from spark_statestore.connectors.spark.follower.feed import (
        FeedStats,
        column_feed_batches,
        feed_batches,
        feed_ddl,
    )
    from spark_statestore.connectors.spark.options import parse_source_options

    topic = make_topic(partitions=PARTITIONS, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    produce(bootstrap, topic, bad=on_missing == "skip")
    options = parse_source_options(
        {
            "path": "/tmp/unused-store",
            "kafka.bootstrap.servers": bootstrap,
            "changelog": topic,
            "onmissingposition": on_missing,
            **formats,
        }
    )
    schema = StructType.fromDDL(feed_ddl(options))
    import spark_statestore_native

    source = KafkaChangelogSource(bootstrap, topic)
    try:
        ends = source.end_offsets(list(range(PARTITIONS)))
    finally:
        source.close()
    # A whole partition, a range from inside a transaction, one ending at its end.
    ranges = [(0, ends[0]), (3, 57), (ends[2] - 30, ends[2])]
    for partition, (start, end) in enumerate(ranges):
        reference_stats, fast_stats = FeedStats(), FeedStats()
        messages = read_range(bootstrap, topic, partition, start, end)
        chunks = read_range_columns(
            spark_statestore_native,
            bootstrap,
            topic,
            partition,
            start,
            end,
            on_missing=options.on_missing_position,
        )
        assert chunks is not None
        reference = pa.Table.from_batches(
            list(feed_batches(messages, options, schema, reference_stats))
        )
        fast = pa.Table.from_batches(
            list(column_feed_batches(chunks, topic, options, schema, fast_stats))
        )
        assert fast.schema == reference.schema
        assert fast.to_pylist() == reference.to_pylist()
        assert fast_stats == reference_stats


def two_transactions(bootstrap: str, topic: str) -> None:
    """Two committed transactions of 5 and 3 records into partition 0 of ``topic``: offsets
    0-4, a commit marker at 5, 6-8, a marker at 9."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{topic}"})
    producer.init_transactions(30)
    for count in (5, 3):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, key=b"k%d" % i, value=b"v", partition=0)
        producer.commit_transaction(30)


def test_a_poll_that_returns_a_transaction_covers_its_marker(
    kafka_broker: Any, make_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The offsets a poll reports are past the commit marker after its records at once, not
    only once the partition-end event of the next fetch arrives (librdkafka 2.12's batch
    path reports positions one past a partition end: the column reader corrects that, and
    must not lose the marker doing it)."""
    topic = make_topic(partitions=1, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    two_transactions(bootstrap, topic)
    for mode in ("1", "0"):
        monkeypatch.setenv(ENV, mode)
        # The fetch after the records waits 3 s for more: no partition end before then.
        source = KafkaChangelogSource(bootstrap, topic, config={"fetch.wait.max.ms": 3_000})
        try:
            end = source.end_offsets([0])[0]
            assert end == 10  # 8 records, 2 markers
            source.assign({0: 0})
            rows = 0
            while rows < 8:  # the records and their markers come in the first fetch
                polled = source.poll(1_000, 30.0, fill=False)
                rows += len(polled.rows)
            assert rows == 8
            assert polled.positions[0] == end, (mode, polled.positions)
            # Then the partition end, from the next fetch: still the end, not one past it.
            source.poll(1_000, 30.0, fill=False)
            polled = source.poll(1_000, 0.2)
            assert polled.positions[0] == end, (mode, polled.positions)
        finally:
            source.close()


def test_a_chunk_poll_ends_at_the_partition_end_not_at_its_timeout(
    kafka_broker: Any, make_topic: Callable[..., str]
) -> None:
    """A poll for a whole chunk returns once the partition's end is reached, with the records
    before it, instead of waiting out its timeout for a chunk that is not coming: every
    change-feed range ending at a partition's end (the last of a micro-batch's) waited for
    it, one second each (a regression test: it took the whole timeout before)."""
    import spark_statestore_native

    from spark_statestore.connectors.kafka import clients
    from spark_statestore.connectors.kafka.follower.columns import NativeReader, native_settings

    topic = make_topic(partitions=1, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    two_transactions(bootstrap, topic)
    settings = native_settings(clients.consumer_settings(bootstrap, None, group="g", what=topic))
    assert settings is not None
    reader = NativeReader(spark_statestore_native, settings, topic, None)
    timeout_s = 120.0
    try:
        reader.assign({0: 0})
        rows, ended = 0, False
        started = time.monotonic()
        while not ended:
            polled = reader.poll_feed(1_000, timeout_s)
            rows += len(polled.records)
            ended = any(code == KafkaError._PARTITION_EOF for code, *_ in polled.events)
            assert time.monotonic() - started < timeout_s / 2, "a poll waited out its timeout"
        assert rows == 8
        assert polled.next_offsets[0] == 10  # past both commit markers
    finally:
        reader.close()
