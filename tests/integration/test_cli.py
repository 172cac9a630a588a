"""The spark-statestore command: tail and the demo, run as real processes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from spark_statestore import Position
from spark_statestore.changelog import encode_position, partition_for_key
from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.integration


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark_statestore.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )


def test_tail_prints_committed_records_with_positions(
    kafka_broker: LocalKafkaCluster, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    position = Position.from_map({"input": {0: 41}})
    producer.produce(
        topic,
        key=b"k1",
        value=b"v1",
        partition=partition_for_key(b"k1", 2),
        headers=[("v", b"\x00"), ("c", encode_position(position, pad_like_kafka_streams=True))],
    )
    producer.produce(topic, key=b"k2", value=None, partition=partition_for_key(b"k2", 2))
    assert producer.flush(30) == 0

    result = cli(
        "tail", "--bootstrap-servers", kafka_broker.bootstrap_servers, "--changelog", topic
    )
    assert result.returncode == 0, result.stderr
    lines = sorted(result.stdout.splitlines())
    assert len(lines) == 2
    assert "upsert key=k1 value=v1" in lines[0] and 'position={"input":{"0":41}}' in lines[0]
    assert "delete key=k2 value=null" in lines[1] and "position=-" in lines[1]


def test_tail_reports_a_truncated_position_header_with_its_location(
    kafka_broker: LocalKafkaCluster, make_topic: Callable[..., str]
) -> None:
    topic = make_topic()
    good = encode_position(Position.from_map({"input": {0: 1}}))
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    producer.produce(
        topic, key=b"ok", value=b"1", partition=0, headers=[("v", b"\x00"), ("c", good)]
    )
    producer.produce(
        topic, key=b"bad", value=b"2", partition=0, headers=[("v", b"\x00"), ("c", good[:-3])]
    )
    assert producer.flush(30) == 0

    strict = cli(
        "tail", "--bootstrap-servers", kafka_broker.bootstrap_servers, "--changelog", topic
    )
    assert strict.returncode == 2
    assert f"topic {topic} partition 0 offset 1" in strict.stderr

    lenient = cli(
        "tail",
        "--bootstrap-servers",
        kafka_broker.bootstrap_servers,
        "--changelog",
        topic,
        "--on-missing-position",
        "skip",
    )
    assert lenient.returncode == 0, lenient.stderr
    assert "key=bad value=2" in lenient.stdout and "position=-" in lenient.stdout


def test_tail_names_a_missing_topic(kafka_broker: LocalKafkaCluster) -> None:
    result = cli(
        "tail",
        "--bootstrap-servers",
        kafka_broker.bootstrap_servers,
        "--changelog",
        "no-such-changelog",
        "--timeout",
        "10",
    )
    assert result.returncode == 2
    assert "no-such-changelog" in result.stderr and "does not exist" in result.stderr


def test_demo_runs_end_to_end_and_cleans_up(tmp_path: Path) -> None:
    """The README's `make demo`, twice in the same work directory (a re-run must work)."""
    import os
    import re
    import socket

    from spark_statestore.store.ownership import read_owner

    workdir = tmp_path / "demo"
    for run in (1, 2):
        result = cli("demo", "--workdir", str(workdir), timeout=420)
        assert result.returncode == 0, f"run {run}:\n{result.stdout}\n{result.stderr}"
        out = result.stdout
        assert re.search(r"demo OK \(\d+ s\)", out), out
        assert "demo FAILED" not in result.stderr
        assert "transaction 4 ABORTED:" in out
        live, more = out.split("=== 4.")[1].split("=== 5.")
        more = more.split("=== 6.")[0]
        # The key lookup, before and after the app restocked item-042 (a later offset).
        first = re.search(r"item-042\s+51\s+3\s+(\d+)\s+\d\d:\d\d", live)
        second = re.search(r"item-042\s+151\s+3\s+(\d+)\s+\d\d:\d\d", more)
        assert first and second, out
        assert int(second.group(1)) > int(first.group(1))
        # The range skips the tombstoned item-013; the aggregate counts 49 items, no aborted value.
        assert re.search(r"item-012\s+64.*\n\s+item-014\s+68", live), live
        assert re.search(r"\s49\s+2979\s+20\s+99\s+0\n", live), live
        # Positions merged from the c headers, and the position after the app's later writes.
        for partition, offset in ((0, 10), (1, 11), (2, 23), (3, 16)):
            assert re.search(rf"inventory-orders\s+{partition}\s+{offset}\n", live), live
        for partition, offset in ((2, 24), (3, 18)):
            assert re.search(rf"inventory-orders\s+{partition}\s+{offset}\n", more), more
        # The lag view: 4 partitions, all caught up.
        assert len(re.findall(r"^\s+[0-3]\s+(\d+)\s+\1\s+0$", live, re.MULTILINE)) == 4, live
        # No row the demo printed (feed or SQL) holds the aborted value.
        assert not re.search(r"item-\d{3}\s+999999", out), out
        assert "micro-batch" in out and 'position {"inventory-orders":' in out
        assert "Stage " not in result.stderr  # no console progress bars

        # The loop: the Spark job leads a store through the sink, another query follows it.
        loop, bounded = out.split("=== 6.")[1].split("=== 7.")
        bounded = bounded.split("=== 8.")[0]
        category_rows = re.compile(r"^\s+(item-0\d)\s+(\d+)\s+\2\s+(\d+@\d+)\s+\3$", re.MULTILINE)
        changelog_rows = re.compile(
            r"^\s+inventory-app-stock-changelog\s+([0-3])\s+(\d+)\s+\2$", re.MULTILINE
        )
        for section, item_04 in ((loop, "759"), (bounded, "747")):
            # Leader == follower: the same total at the same changelog record, per category.
            rows = {m.group(1): m.group(2) for m in category_rows.finditer(section)}
            assert len(rows) == 6 and rows["item-04"] == item_04, section
            assert "same 6 rows, the same changelog records; totals = the app's stock" in section
            # Equal positions, on all 4 partitions of the app's changelog.
            assert len(changelog_rows.findall(section)) == 4, section
            assert "equal, and at the end of the app's changelog:" in section
        # The bounded read right after the app's next write: refused clearly (or already
        # caught up), then the same read waiting for the follower (positionBoundTimeoutMs)
        # answers with the new total.
        sale = re.search(r"record inventory-app-stock-changelog partition 3 offset (\d+)", bounded)
        assert sale, bounded
        bound = f'positionBound {{"inventory-app-stock-changelog":{{"3":{sale.group(1)}}}}}'
        assert bound in bounded, bounded
        refused = re.search(
            r"refused: NOT_UP_TO_BOUND: the store at \S+units-follower-store", bounded
        )
        assert refused or "had already gone through the leader into the follower" in bounded
        assert "now waiting for the follower: positionBoundTimeoutMs 60000" in bounded
        assert re.search(r"answered \d+\.\d s after the write", bounded), bounded
        assert "bounded read OK: item-04 went from 759 to 747 units" in bounded, bounded
        assert "the leader and follower queries are stopped" in bounded

        # Every process it started is gone: the broker's ports are closed, the stores'
        # owners (the queries' reader processes, the sink's commit process) have exited.
        bootstrap = out.split("bootstrap.servers = ", 1)[1].split()[0]
        for hostport in bootstrap.split(","):
            host, port = hostport.rsplit(":", 1)
            with socket.socket() as sock:
                assert sock.connect_ex((host, int(port))) != 0, f"{hostport} still accepts"
        for store in ("stock-store", "report-input-store", "units-store", "units-follower-store"):
            owner = read_owner(str(workdir / store))
            if owner is not None:
                with pytest.raises(ProcessLookupError):
                    os.kill(owner.pid, 0)
