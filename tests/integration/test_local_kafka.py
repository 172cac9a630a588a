"""``spark-statestore broker`` and the local Kafka cluster behind it: real JVM processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from spark_statestore.connectors.kafka.errors import (
    BrokerStartError,
    JarsMissingError,
    JavaNotFoundError,
)
from spark_statestore.connectors.kafka.local import LocalKafkaCluster, cluster
from spark_statestore.connectors.kafka.local.jars import ENV_CACHE, kafka_jars
from tests.conftest import REPO_ROOT, run_python

pytestmark = pytest.mark.integration


def broker_command(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "spark_statestore.cli", "broker", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        start_new_session=True,
    )


def java_pids_under(path: Path) -> list[int]:
    """JVMs whose command line names a file under ``path`` (a cluster's nodes)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "kafka.Kafka" in cmdline and str(path) in cmdline:
            pids.append(int(entry.name))
    return pids


def topic_config(bootstrap: str, topic: str, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    return str(configs[name].value)


def test_broker_command_runs_a_cluster_until_sigterm_and_cleans_up(tmp_path: Path) -> None:
    bootstrap_file = tmp_path / "bootstrap"
    proc = broker_command(
        "--topic",
        "t:8",
        "--topic",
        "app-store-changelog:2",
        "--bootstrap-file",
        str(bootstrap_file),
    )
    data_dir = None
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline().strip()
        assert first.startswith("bootstrap.servers="), first + proc.stderr.read()
        bootstrap = first.split("=", 1)[1]
        assert bootstrap_file.read_text().strip() == bootstrap
        assert proc.stdout.readline().strip() == "topic t partitions=8"
        assert proc.stdout.readline().strip() == "topic app-store-changelog partitions=2"
        banner = proc.stderr.readline()
        assert "Apache Kafka 4.3.1 running in KRaft mode (1 node(s)" in banner, banner
        data_dir = Path(banner.split("data in ", 1)[1].split(" (removed on exit)")[0])
        assert len(java_pids_under(data_dir)) == 1
        # Changelog topics are compacted, as Kafka Streams creates them; others are not.
        assert topic_config(bootstrap, "app-store-changelog", "cleanup.policy") == "compact"
        assert topic_config(bootstrap, "t", "cleanup.policy") == "delete"
        # Another process uses the topic: every one of the 8 partitions takes a record.
        child = run_python(
            """
            import sys
            from confluent_kafka import Consumer, Producer, TopicPartition
            p = Producer({"bootstrap.servers": sys.argv[1]})
            for i in range(8):
                p.produce("t", b"x", partition=i)
            assert p.flush(30) == 0
            c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "g"})
            print([c.get_watermark_offsets(TopicPartition("t", i), 10)[1] for i in range(8)])
            """,
            bootstrap,
        )
        assert child.stdout.strip() == "[1, 1, 1, 1, 1, 1, 1, 1]"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "received SIGTERM, shutting down" in err
    assert data_dir is not None and not data_dir.exists()  # temporary data removed
    assert java_pids_under(data_dir) == []
    assert not bootstrap_file.exists()


@pytest.mark.soak  # in soak since the scale bench needed CI's time
def test_a_kept_data_dir_survives_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "kafka"
    with LocalKafkaCluster(data_dir=data) as kafka:
        kafka.create_topic("kept", 1)
        run_python(
            """
            import sys
            from confluent_kafka import Producer
            p = Producer({"bootstrap.servers": sys.argv[1]})
            p.produce("kept", b"still here")
            assert p.flush(30) == 0
            """,
            kafka.bootstrap_servers,
        )
    assert (data / "node-1" / "data" / "meta.properties").is_file()
    with LocalKafkaCluster(data_dir=data) as kafka:
        child = run_python(
            """
            import sys
            from confluent_kafka import Consumer, TopicPartition
            c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "g"})
            print(c.get_watermark_offsets(TopicPartition("kept", 0), 30))
            """,
            kafka.bootstrap_servers,
        )
        assert child.stdout.strip() == "(0, 1)"
    assert not java_pids_under(data)


def test_killing_the_python_process_takes_its_jvms_along(tmp_path: Path) -> None:
    proc = broker_command("--data-dir", str(tmp_path / "k"))
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("bootstrap.servers=")
        assert len(java_pids_under(tmp_path / "k")) == 1
    finally:
        proc.kill()  # SIGKILL: no cleanup code runs in the parent
        proc.communicate(timeout=30)
    # The kernel delivers the parent-death signal to the JVM: wait until it is gone.
    deadline = time.monotonic() + 30
    while java_pids_under(tmp_path / "k"):
        assert time.monotonic() < deadline, "the JVM outlived its parent"
        threading.Event().wait(0.1)


def run_broker_and_fail(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark_statestore.cli", "broker"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO_ROOT,
        check=False,
    )


def test_missing_jars_say_what_to_run(tmp_path: Path) -> None:
    done = run_broker_and_fail(dict(os.environ, **{ENV_CACHE: str(tmp_path / "empty")}))
    assert done.returncode == 2
    assert "spark-statestore jars" in done.stderr and "kafka 4.3.1" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_missing_java_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # python, but no java
    done = run_broker_and_fail(env)
    assert done.returncode == 2
    assert "Java 17" in done.stderr and "openjdk-17" in done.stderr, done.stderr
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))  # no bin/java there
    monkeypatch.setenv("PATH", env["PATH"])
    with pytest.raises(JavaNotFoundError, match="JAVA_HOME"):
        cluster.find_java()


def test_a_taken_port_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        free: Callable[[str, int], list[int]] = cluster.free_ports

        def ports_with_a_taken_one(host: str, count: int) -> list[int]:
            return [port, *free(host, count - 1)]

        monkeypatch.setattr(cluster, "free_ports", ports_with_a_taken_one)
        # Every attempt gets the taken port: one attempt shows the message (the retries with
        # new ports are what a real race gets; three JVM starts cost CI 16 s more).
        monkeypatch.setattr(cluster, "_START_ATTEMPTS", 1)
        with pytest.raises(BrokerStartError) as failed:
            LocalKafkaCluster().start()
        assert failed.value.port_taken
        assert f"127.0.0.1:{port}" in str(failed.value) and "taken" in str(failed.value)
    finally:
        taken.close()


def test_the_jar_cache_refuses_an_incomplete_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV_CACHE, str(tmp_path))
    jars = kafka_jars()
    jars.directory.mkdir(parents=True)
    (jars.directory / "jars.txt").write_text("kafka_2.13-4.3.1.jar\n")
    with pytest.raises(JarsMissingError, match=r"incomplete .*kafka_2\.13-4\.3\.1\.jar"):
        jars.jars()


@pytest.mark.soak  # in soak since the scale bench needed CI's time
def test_a_kafka_source_session_needs_a_fresh_driver() -> None:
    """Spark's Kafka connector reaches a driver JVM only when it starts: a later ask in the
    same process is a clear error, even after stop(); a fresh process gets the source."""
    done = run_python(
        """
        from spark_statestore.connectors.spark.session import local_session
        from spark_statestore.errors import StateStoreError
        local_session("plain").stop()
        try:
            local_session("late", kafka_source=True)
        except StateStoreError as exc:
            print("refused:", exc)
        """,
        timeout=300,
    )
    assert "refused: Spark's Kafka connector is not on this process's Spark driver" in done.stdout
    fresh = run_python(
        """
        from spark_statestore.connectors.spark.session import local_session
        spark = local_session("kafka", kafka_source=True)
        reader = spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
        print(reader.option("subscribe", "t").load().columns)
        """,
        timeout=300,
    )
    assert "'key', 'value', 'topic', 'partition', 'offset'" in fresh.stdout
