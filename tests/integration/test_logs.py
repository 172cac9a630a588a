"""Logs of the CLI against a real broker that stops: librdkafka's connection noise stays out
of a user's terminal (through our logger at DEBUG instead), an expected failure is one line
with no traceback, and ``--log-format json`` writes JSON lines only."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.kafka.logs import LOGGER_NAME
from tests.conftest import REPO_ROOT
from tests.integration.test_follow_cli import FollowProcess, follow_command
from tests.integration.test_follower import ChangelogWriter, random_changes

pytestmark = [pytest.mark.integration, pytest.mark.beside]  # self-contained: beside the main run

PARTITIONS = 2
TIMEOUT_S = 120.0
# What librdkafka prints by itself ("%3|1795885350.958|FAIL|rdkafka#consumer-1| [thrd:...]:
# 127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused").
RAW_LINE = "|rdkafka#"
REFUSED = "Connect to ipv4#"


@dataclass(frozen=True)
class Changelog:
    cluster: LocalKafkaCluster
    topic: str

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers

    def stop_broker(self) -> None:
        if self.cluster.nodes[0].is_running():
            self.cluster.stop(1)


@pytest.fixture(scope="module")
def changelog() -> Iterator[Changelog]:
    """A changelog on a broker of this module's own (the tests stop it)."""
    with LocalKafkaCluster(brokers=1, config={"log.retention.ms": "-1"}) as cluster:
        topic = "logs-test-changelog"
        cluster.create_topic(topic, PARTITIONS, compacted=False)
        writer = ChangelogWriter(cluster.bootstrap_servers, topic, PARTITIONS)
        rng = random.Random(38)
        for _ in range(4):
            writer.transaction(random_changes(rng, 25))
        writer.producer.flush(30)
        del writer  # its own producer would print librdkafka's lines into pytest's output
        yield Changelog(cluster, topic)


@pytest.fixture
def following() -> Iterator[Callable[..., FollowProcess]]:
    """Factory of background ``follow`` processes (``env`` settings prepended with
    ``env(1)``), all killed when the test ends."""
    started: list[FollowProcess] = []

    def start(command: list[str], **env: str) -> FollowProcess:
        settings = [f"{name}={value}" for name, value in env.items()]
        process = FollowProcess(["env", *settings, *command] if settings else command)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


def test_a_stopped_broker_prints_no_librdkafka_line_and_verbose_logs_them_through_ours(
    changelog: Changelog, following: Callable[..., FollowProcess], tmp_path: Path
) -> None:
    bootstrap, topic = changelog.bootstrap, changelog.topic

    def command(name: str, *flags: str) -> list[str]:
        base = follow_command(bootstrap, topic, tmp_path / name, "--no-progress")
        return [*base[:3], *flags, *base[3:]]  # global flags go before the subcommand

    # The default paths (the compiled reader; metadata clients nobody polls), the reference
    # reader (confluent-kafka, polled), and the latter with --verbose.
    quiet = following(command("native"))
    reference = following(command("reference"), SPARK_STATESTORE_NATIVE="0")
    verbose = following(command("verbose", "--verbose"), SPARK_STATESTORE_NATIVE="0")
    for process in (quiet, reference, verbose):
        process.wait_for("caught up: ")
    changelog.stop_broker()
    # Observable proof that the clients have been refused again and again: the verbose
    # process logs each refused connection (its reference reader retries all along).
    refused = [verbose.wait_for(REFUSED) for _ in range(3)]
    for line in refused:
        assert f" DEBUG {LOGGER_NAME}: FAIL [rdkafka#consumer-" in line, line
    assert all(process.stop(signal.SIGTERM) == 0 for process in (quiet, reference, verbose))
    for process in (quiet, reference):
        text = "".join(process.lines)
        assert RAW_LINE not in text and REFUSED not in text and "librdkafka" not in text, text
        assert "Traceback" not in text, text
        assert text.splitlines()[-1].startswith("stopped: "), text
    verbose_text = "".join(verbose.lines)
    assert RAW_LINE not in verbose_text and "Traceback" not in verbose_text, verbose_text


def test_an_expected_failure_is_one_line_and_json_lines_are_all_json(
    changelog: Changelog,
) -> None:
    """``tail`` of the stopped broker: one line of error in text; with ``--log-format json
    --verbose``, every line of stderr is a JSON object, librdkafka's refused connections
    among them (at DEBUG), the error last (no traceback)."""
    changelog.stop_broker()
    tail = ["tail", "--bootstrap-servers", changelog.bootstrap, "--changelog", changelog.topic]
    tail += ["--timeout", "3"]

    def run(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "spark_statestore.cli", *flags, *tail],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            cwd=REPO_ROOT,
        )

    text = run()
    assert text.returncode == 2
    (line,) = text.stderr.splitlines()
    assert line.startswith("spark-statestore tail: error: cannot read the metadata of topic ")
    assert "check kafka.bootstrap.servers" in line
    as_json = run("--log-format", "json", "--verbose")
    assert as_json.returncode == 2
    records = [json.loads(line) for line in as_json.stderr.splitlines()]
    assert all(isinstance(record, dict) for record in records)
    librdkafka = [r for r in records if r["logger"] == LOGGER_NAME]
    assert librdkafka and all(r["level"] == "DEBUG" for r in librdkafka if REFUSED in r["message"])
    assert any(r["facility"] == "FAIL" and REFUSED in r["message"] for r in librdkafka)
    last = records[-1]
    assert (last["level"], last["command"], last["error"]) == ("ERROR", "tail", "KafkaClientError")
    assert last["message"].startswith("spark-statestore tail: error: cannot read the metadata ")
    assert not any("exc" in record for record in records)
