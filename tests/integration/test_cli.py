"""The spark-statestore command: tail and the demo, run as real processes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from spark_statestore import Position
from spark_statestore.changelog import encode_position, partition_for_key
from spark_statestore.connectors.kafka.embedded import EmbeddedBroker
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
    kafka_broker: EmbeddedBroker, make_topic: Callable[..., str]
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
    kafka_broker: EmbeddedBroker, make_topic: Callable[..., str]
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


def test_tail_names_a_missing_topic(kafka_broker: EmbeddedBroker) -> None:
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


def test_demo_runs_end_to_end_and_cleans_up() -> None:
    result = cli("demo", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "demo OK" in out
    assert "ABORTED-NEVER-VISIBLE" not in out.split("=== 3.")[1].split("=== 4.")[0]
    assert "delete key=pear value=null" in out
    assert "upsert key=plum value=8" in out and 'position={"orders":' in out
    # The broker child is gone: nothing listens on its ports any more.
    bootstrap = out.split("bootstrap.servers = ", 1)[1].split()[0]
    import socket

    for hostport in bootstrap.split(","):
        host, port = hostport.rsplit(":", 1)
        with socket.socket() as sock:
            assert sock.connect_ex((host, int(port))) != 0, f"{hostport} still accepts connections"
