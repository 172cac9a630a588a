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


@pytest.mark.beside  # the demo starts its own broker, app and Spark: runs beside the main run
def test_demo_runs_end_to_end_with_the_real_kafka_streams_app_and_cleans_up(
    tmp_path: Path,
) -> None:
    """The README's `make demo`, twice in the same work directory (a re-run must work)."""
    import os
    import re
    import socket

    from spark_statestore.store.ownership import read_owner

    workdir = tmp_path / "demo"
    state_dir = workdir / "kafka-streams-state"
    for run in (1, 2):
        result = cli("demo", "--workdir", str(workdir), timeout=420)
        assert result.returncode == 0, f"run {run}:\n{result.stdout}\n{result.stderr}"
        out = result.stdout
        assert re.search(r"demo OK \(\d+ s\)", out), out
        assert "demo FAILED" not in result.stderr
        assert "Stage " not in result.stderr  # no console progress bars

        # The other application is the real Kafka Streams app: its JVM reported its states,
        # wrote RocksDB stores in its state directory, and logged the changelog we follow.
        app = out.split("=== 2.")[1].split("=== 3.")[0]
        assert "Kafka Streams is RUNNING" in app and "REBALANCING -> RUNNING" in app, app
        for task in range(4):
            assert (state_dir / "shop-app" / f"0_{task}" / "rocksdb" / "totals").is_dir()
        assert "transaction 3 ABORTED:" in app
        assert re.search(r"the app has logged phase 1: shop-app-totals-changelog records", app)

        live, more = out.split("=== 4.")[1].split("=== 5.")
        more = more.split("=== 6.")[0]
        # The key lookup, before and after the app logged cust-042's new total (later offset).
        first = re.search(r"cust-042\s+57\s+3\s+(\d+)\s+\d\d:\d\d", live)
        second = re.search(r"cust-042\s+157\s+3\s+(\d+)\s+\d\d:\d\d", more)
        assert first and second, out
        assert int(second.group(1)) > int(first.group(1))
        assert re.search(r"cust-010\s+70\s.*\n(\s+cust-01[1-4]\s.*\n){4}\s+cust-015\s+95", live)
        # 50 customers, the sum of every committed order, no total with the aborted 999999.
        assert re.search(r"\s50\s+3040\s+20\s+101\s+0\n", live), live
        # Positions merged from the c headers; the lag view: 4 partitions, caught up.
        assert len(re.findall(r"^\s+shop-orders\s+[0-3]\s+\d+$", live, re.MULTILINE)) == 4
        assert len(re.findall(r"^\s+[0-3]\s+(\d+)\s+\1\s+0$", live, re.MULTILINE)) == 4, live
        # The app's own IQv2 answers beside the replica: equal, at the same position.
        for section, customers, total in ((live, 50, 3040), (more, 51, 3215)):
            positions = re.findall(
                rf"^\s+(Kafka Streams|our replica)\s+{customers}\s+{total}\s+(\{{.+\}})$",
                section,
                re.MULTILINE,
            )
            assert [who for who, _ in positions] == ["Kafka Streams", "our replica"], section
            assert positions[0][1] == positions[1][1]
            assert f"equal key for key ({customers} customers) and at the same position" in section
        assert re.search(r"Kafka Streams\s+cust-042\s+157\n\s+our replica\s+cust-042\s+157", more)
        # No row the demo printed (a customer's or a group's) includes an aborted 999999.
        assert not re.search(r"cust-\d{2,3}\s+\d{7,}", out), out
        assert "micro-batch" in out and 'position {"shop-orders":' in out

        # The loop: the Spark job leads a store through the sink, another query follows it.
        loop, bounded = out.split("=== 6.")[1].split("=== 7.")
        bounded = bounded.split("=== 8.")[0]
        group_rows = re.compile(r"^\s+(cust-0\d)\s+(\d+)\s+\2\s+(\d+@\d+)\s+\3$", re.MULTILINE)
        changelog_rows = re.compile(
            r"^\s+shop-app-totals-changelog\s+([0-3])\s+(\d+)\s+\2$", re.MULTILINE
        )
        for section, cust_04 in ((loop, "771"), (bounded, "783")):
            # Leader == follower: the same sum at the same changelog record, per group.
            rows = {m.group(1): m.group(2) for m in group_rows.finditer(section)}
            assert len(rows) == 6 and rows["cust-04"] == cust_04, section
            assert "same 6 rows, the same changelog records; sums = the app's totals" in section
            # Equal positions, on all 4 partitions of the app's changelog.
            assert len(changelog_rows.findall(section)) == 4, section
            assert "equal, and at the end of the app's changelog:" in section
        # The bounded read right after Kafka Streams logged the next order: refused clearly
        # (or already caught up), then the same read waiting for the follower
        # (positionBoundTimeoutMs) answers with the new sum.
        logged = re.search(
            r"Kafka Streams logged the new total at record shop-app-totals-changelog "
            r"partition 3 offset (\d+)",
            bounded,
        )
        assert logged, bounded
        bound = f'positionBound {{"shop-app-totals-changelog":{{"3":{logged.group(1)}}}}}'
        assert bound in bounded, bounded
        refused = re.search(
            r"refused: NOT_UP_TO_BOUND: the store at \S+groups-follower-store", bounded
        )
        assert refused or "had already gone through the leader into the follower" in bounded
        assert "now waiting for the follower: positionBoundTimeoutMs 60000" in bounded
        assert re.search(r"answered \d+\.\d s after the write", bounded), bounded
        assert "bounded read OK: cust-04 went from 771 to 783" in bounded, bounded

        # Routing: the leader's store server and the follower are announced; the router's
        # key query is answered by the leader, then, the leader stopped, by the follower.
        routed = out.split("=== 8.")[1].split("=== 9.")[0]
        roles = re.findall(
            r"^\s+(follower|leader)\s+\d+\s+grpc\+tcp://\S+\s+0,1\s+0$", routed, re.M
        )
        assert roles == ["follower", "leader"], routed
        answers = re.findall(r"^\s+total 783, partition \d, position (\{.+\})$", routed, re.M)
        assert len(answers) == 2 and answers[0] == answers[1], routed
        assert re.search(r"store 'groups-store' .*\n(.*\n)+.*store 'groups-follower-store'", routed)
        assert "the same total at the same position, from either replica" in routed
        assert "the leader and follower queries are stopped" in routed
        assert "the Kafka Streams app is stopped" in out

        # Every process it started is gone: the broker's ports are closed, no process runs
        # with the app's state directory (its JVM), the stores' owners (the queries' reader
        # processes, the sink's commit process) have exited.
        bootstrap = out.split("bootstrap.servers = ", 1)[1].split()[0]
        for hostport in bootstrap.split(","):
            host, port = hostport.rsplit(":", 1)
            with socket.socket() as sock:
                assert sock.connect_ex((host, int(port))) != 0, f"{hostport} still accepts"
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                assert str(state_dir).encode() not in cmdline.read_bytes(), cmdline
            except (FileNotFoundError, ProcessLookupError):
                continue  # exited while we looked
        for store in ("totals-store", "groups-store", "groups-follower-store"):
            owner = read_owner(str(workdir / store))
            if owner is not None:
                with pytest.raises(ProcessLookupError):
                    os.kill(owner.pid, 0)
