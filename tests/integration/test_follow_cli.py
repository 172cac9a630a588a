"""``spark-statestore follow`` as a real process against a real Kafka broker, and a quick
run of the ``follower`` bench suite."""

from __future__ import annotations

import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.cli import main
from spark_statestore.connectors.kafka.tail import tail_changelog
from spark_statestore.store import Store
from tests.conftest import REPO_ROOT
from tests.integration.test_follower import ChangelogWriter, random_changes

pytestmark = pytest.mark.integration

PARTITIONS = 3
TIMEOUT_S = 120.0


# -- helpers ------------------------------------------------------------------------------
def follow_command(bootstrap: str, topic: str, path: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "spark_statestore.cli",
        "follow",
        "--bootstrap-servers",
        bootstrap,
        "--changelog",
        topic,
        str(path),
        *extra,
    ]


def follow(bootstrap: str, topic: str, path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """One ``follow --until-caught-up --no-progress`` run to completion."""
    return subprocess.run(
        follow_command(bootstrap, topic, path, "--until-caught-up", "--no-progress", *extra),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=REPO_ROOT,
    )


def applied_by(result: subprocess.CompletedProcess[str]) -> int:
    """The record count of the run's ``caught up`` line."""
    assert result.returncode == 0, result.stderr
    match = re.search(r"^caught up: ([\d,]+) records applied", result.stderr, re.MULTILINE)
    assert match, result.stderr
    return int(match.group(1).replace(",", ""))


class FollowProcess:
    """A ``follow`` process running in the background; its stderr lines are read as they
    come, so a test waits for a line instead of sleeping."""

    def __init__(self, command: list[str]) -> None:
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, text: str, timeout_s: float = TIMEOUT_S) -> str:
        """The first stderr line containing ``text``; fails if the process ends first."""
        while True:
            try:
                line = self._queue.get(timeout=timeout_s)
            except queue.Empty:
                raise AssertionError(f"no {text!r} within {timeout_s} s: {self.lines}") from None
            if line is None:
                raise AssertionError(f"process ended before {text!r}: {self.lines}")
            self.lines.append(line)
            if text in line:
                return line

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=TIMEOUT_S)
        self._reader.join(timeout=TIMEOUT_S)
        while (line := self._queue.get_nowait()) is not None:
            self.lines.append(line)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def following() -> Iterator[Callable[[list[str]], FollowProcess]]:
    """Factory of background ``follow`` processes, all killed when the test ends."""
    started: list[FollowProcess] = []

    def start(command: list[str]) -> FollowProcess:
        process = FollowProcess(command)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


@pytest.fixture
def writer(kafka_broker: Any, make_topic: Callable[..., str]) -> Iterator[ChangelogWriter]:
    topic = make_topic(partitions=PARTITIONS, suffix="-changelog")
    w = ChangelogWriter(kafka_broker.bootstrap_servers, topic, PARTITIONS)
    yield w
    w.producer.flush(10)


def store_content(path: Path) -> tuple[dict[bytes, bytes], dict[int, int], dict[str, Any]]:
    """Content, changelog offsets and position of a closed store, opened read-only."""
    with Store.open(path) as store, store.snapshot() as snapshot:
        metadata = store.metadata
        return (
            dict(snapshot.items()),
            dict(metadata.changelog_offsets),
            metadata.position.to_map(),
        )


def fold_up_to(bootstrap: str, topic: str, offsets: Mapping[int, int]) -> dict[bytes, bytes]:
    """The committed changelog applied up to (excluding) ``offsets`` of each partition."""
    folded: dict[bytes, bytes] = {}
    for record in tail_changelog(bootstrap, topic, timeout_s=60):
        if record.offset >= offsets.get(record.partition, 0):
            continue
        if record.value is None:
            folded.pop(record.key, None)
        else:
            folded[record.key] = record.value
    return folded


# -- the command ----------------------------------------------------------------------------
def test_until_caught_up_restores_exactly_the_fold_of_the_changelog(
    kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path
) -> None:
    rng = random.Random(3)
    for n in range(5):
        writer.transaction(random_changes(rng, 25))
        if n == 1:
            writer.transaction([(b"k000", b"ABORTED")], abort=True)
    path = tmp_path / "store"

    result = follow(kafka_broker.bootstrap_servers, writer.topic, path, "--chunk-records", "7")

    assert applied_by(result) == 125
    assert result.stdout == ""
    assert "\r" not in result.stderr  # --no-progress
    assert result.stderr.count("caught up") == 1
    content, offsets, position = store_content(path)
    assert content == writer.model
    assert b"ABORTED" not in content.values()
    assert position == writer.expected_position()
    assert set(offsets) == set(range(PARTITIONS))


def test_a_second_run_resumes_where_the_first_ended(
    kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path
) -> None:
    rng = random.Random(5)
    for _ in range(3):
        writer.transaction(random_changes(rng, 20))
    path = tmp_path / "store"
    bootstrap = kafka_broker.bootstrap_servers
    assert applied_by(follow(bootstrap, writer.topic, path)) == 60
    first_offsets = store_content(path)[1]

    again = follow(bootstrap, writer.topic, path)
    assert applied_by(again) == 0  # nothing new: nothing re-applied
    assert store_content(path)[1] == first_offsets

    writer.transaction(random_changes(rng, 9))
    writer.transaction([(b"new-key", b"1")], abort=True)
    writer.transaction(random_changes(rng, 4))
    third = follow(bootstrap, writer.topic, path)
    assert applied_by(third) == 13  # only the new committed records
    content, _offsets, position = store_content(path)
    assert content == writer.model
    assert position == writer.expected_position()


def test_a_partition_subset_holds_only_its_partitions(
    kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path
) -> None:
    from spark_statestore.changelog import partition_for_key

    writer.transaction(random_changes(random.Random(8), 40))
    path = tmp_path / "subset"

    result = follow(kafka_broker.bootstrap_servers, writer.topic, path, "--partitions", "0,2")

    assert applied_by(result) > 0
    assert "partitions 0,2" in result.stderr
    content, offsets, _position = store_content(path)
    expected = {k: v for k, v in writer.model.items() if partition_for_key(k, PARTITIONS) in (0, 2)}
    assert content == expected
    assert set(offsets) <= {0, 2}
    # The subset is fixed at creation: following all partitions into it is refused.
    refused = follow(kafka_broker.bootstrap_servers, writer.topic, path)
    assert refused.returncode == 2
    assert "partitions [0, 2]" in refused.stderr and "cannot change" in refused.stderr


def test_a_missing_topic_is_named_and_leaves_no_store(kafka_broker: Any, tmp_path: Path) -> None:
    path = tmp_path / "store"

    result = follow(kafka_broker.bootstrap_servers, "no-such-changelog", path)

    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("spark-statestore follow: error:")
    assert "no-such-changelog" in lines[0] and "does not exist" in lines[0]
    assert not path.exists()


def test_a_record_it_cannot_apply_stops_it_with_one_line_and_no_traceback(
    kafka_broker: Any, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Issue 38: the follower thread logged its failure with a traceback, printed before the
    command's own one-line error. An expected failure (bad input) is the one line only."""
    from confluent_kafka import Producer

    topic = make_topic(1, suffix="-changelog")
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    # A position header of version 0 without its position: the follower must stop there.
    producer.produce(topic, key=b"k", value=b"v", headers=[("v", b"\x00")])
    assert producer.flush(30) == 0

    result = follow(kafka_broker.bootstrap_servers, topic, tmp_path / "store")

    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    started, failed = result.stderr.strip().splitlines()  # its start line, then the error
    assert started.startswith(f"following {topic} into "), started
    assert failed.startswith("spark-statestore follow: error:"), failed
    assert f"topic {topic} partition 0 offset 0" in failed, failed


@pytest.mark.parametrize(
    ("partitions", "fragment"),
    [
        ("0,x", "option --partitions: 'x' in '0,x' is not a partition number"),
        ("2-1", "option --partitions: range '2-1'"),
        (
            "1,5-6",
            "option --partitions: changelog '{topic}' has 3 partition(s) (0-2), no partition 5-6",
        ),
    ],
)
def test_bad_partitions_are_refused_naming_the_option(
    kafka_broker: Any,
    writer: ChangelogWriter,
    tmp_path: Path,
    partitions: str,
    fragment: str,
) -> None:
    path = tmp_path / "store"

    result = follow(kafka_broker.bootstrap_servers, writer.topic, path, "--partitions", partitions)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert fragment.format(topic=writer.topic) in result.stderr
    assert not path.exists()


def test_bad_kafka_settings_are_refused_naming_the_flag(
    kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["follow", "--bootstrap-servers", kafka_broker.bootstrap_servers]
    args += ["--changelog", writer.topic, str(tmp_path / "s"), "--until-caught-up"]

    assert main([*args, "--kafka", "no-equals-sign"]) == 2
    assert "option --kafka: expected KEY=VALUE" in capsys.readouterr().err
    assert main([*args, "--kafka", "no.such.setting=1"]) == 2
    assert "option --kafka: the Kafka client refused" in capsys.readouterr().err
    assert main([*args, "--kafka", "isolation.level=read_uncommitted"]) == 2
    assert "read_committed" in capsys.readouterr().err
    assert main([*args, "--chunk-records", "0"]) == 2
    assert "option --chunk-records must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_a_leader_application_id_gives_the_store_the_leaders_committed_position(
    kafka_broker: Any,
    make_topic: Callable[..., str],
    tmp_path: Path,
    following: Callable[[list[str]], FollowProcess],
) -> None:
    """``--leader-application-id``: a changelog without position headers, and a leader
    group that committed its input offsets; the store takes the committed position (the
    offset of the last processed input record) once it has applied the changelog."""
    from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    bootstrap = kafka_broker.bootstrap_servers
    changelog = make_topic(partitions=PARTITIONS, suffix="-changelog")
    inputs = make_topic(partitions=2, suffix="-input")
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        producer.produce(changelog, key=f"k{i}".encode(), value=b"v")
    assert producer.flush(30) == 0
    group = f"leader-{inputs}"
    offsets = [TopicPartition(inputs, 0, 7), TopicPartition(inputs, 1, 3)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])
    futures[group].result(timeout=30)
    path = tmp_path / "store"

    process = following(
        follow_command(
            bootstrap, changelog, path, "--no-progress", "--leader-application-id", group
        )
    )
    line = process.wait_for("position from leader")
    assert group in line and inputs in line
    assert process.stop(signal.SIGTERM) == 0
    content, _offsets, position = store_content(path)
    assert len(content) == 20
    assert position == {inputs: {0: 6, 1: 2}}

    # Without the flag the same changelog gives no position (it has no headers).
    other = tmp_path / "plain"
    assert applied_by(follow(bootstrap, changelog, other)) == 20
    assert store_content(other)[2] == {}


def test_a_store_followed_by_another_process_is_refused_naming_it(
    kafka_broker: Any,
    writer: ChangelogWriter,
    tmp_path: Path,
    following: Callable[[list[str]], FollowProcess],
) -> None:
    writer.transaction(random_changes(random.Random(9), 10))
    path = tmp_path / "store"
    bootstrap = kafka_broker.bootstrap_servers
    owner = following(follow_command(bootstrap, writer.topic, path, "--no-progress"))
    owner.wait_for("caught up")

    second = follow(bootstrap, writer.topic, path)

    assert second.returncode == 2
    assert second.stderr.count("\n") == 1, second.stderr
    assert f"store {path} is owned by" in second.stderr
    assert f"pid {owner.proc.pid} on" in second.stderr
    assert f"spark-statestore follow {writer.topic}" in second.stderr
    assert owner.stop() == 0


def test_sigterm_while_following_stops_cleanly_and_the_store_stays_consistent(
    kafka_broker: Any,
    writer: ChangelogWriter,
    tmp_path: Path,
    following: Callable[[list[str]], FollowProcess],
) -> None:
    rng = random.Random(13)
    for _ in range(3):
        writer.transaction(random_changes(rng, 30))
    path = tmp_path / "store"
    bootstrap = kafka_broker.bootstrap_servers
    process = following(
        follow_command(bootstrap, writer.topic, path, "--no-progress", "--chunk-records", "5")
    )
    caught_up = process.wait_for("caught up")
    assert "records applied" in caught_up and "until SIGINT/SIGTERM" in caught_up
    # Live changes while it follows; SIGTERM may land before, during or after they apply.
    for _ in range(4):
        writer.transaction(random_changes(rng, 30))

    assert process.stop(signal.SIGTERM) == 0
    assert any(line.startswith("stopped: ") for line in process.lines), process.lines

    # Whatever it had applied, the store is the fold of the changelog up to its offsets...
    content, offsets, _position = store_content(path)
    assert content == fold_up_to(bootstrap, writer.topic, offsets)
    # ... and a later run resumes from there to exactly the full fold.
    assert follow(bootstrap, writer.topic, path).returncode == 0
    assert store_content(path)[0] == writer.model


def test_sigint_stops_like_sigterm(
    kafka_broker: Any,
    writer: ChangelogWriter,
    tmp_path: Path,
    following: Callable[[list[str]], FollowProcess],
) -> None:
    writer.transaction(random_changes(random.Random(17), 10))
    path = tmp_path / "store"
    process = following(follow_command(kafka_broker.bootstrap_servers, writer.topic, path))
    process.wait_for("caught up")

    assert process.stop(signal.SIGINT) == 0
    assert store_content(path)[0] == writer.model


# -- the bench suite ----------------------------------------------------------------------
@pytest.mark.soak  # as the other suites' end-to-end runs
def test_the_follower_bench_suite_runs_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    output = tmp_path / "report.json"

    code = main(
        ["bench", "--suite", "follower", "--quick", "--records", "400", "--output", str(output)]
    )

    assert code == 0
    report = json.loads(output.read_text())
    by_name = {m["name"]: m for m in report["measurements"]}
    assert set(by_name) == {"restore", "follow_cli"}
    restore, cli_run = by_name["restore"], by_name["follow_cli"]
    assert restore["target"] == 0.6 and cli_run["target"] is None
    assert restore["unit"] == cli_run["unit"] == "records/s"
    assert len(restore["rounds"]["candidate"]) == len(restore["rounds"]["baseline"]) == 2
    assert restore["ratio"] == pytest.approx(restore["candidate_rate"] / restore["baseline_rate"])
    assert len(cli_run["rounds"]["candidate"]) == 1
    assert "start-up" in cli_run["candidate"]
    for m in (restore, cli_run):
        assert m["candidate_rate"] > 0 and m["baseline_rate"] > 0
        assert m["parameters"]["records"] == 400
        assert m["parameters"]["partitions"] == 8
        assert m["parameters"]["compression"] == "lz4"
    assert list(scratch.iterdir()) == []  # broker log, stores and databases are gone
    out = capsys.readouterr().out
    assert "restore" in out and "follow_cli" in out and ">= 60%" in out
    # The broker child is gone with the suite (other children, e.g. a Spark JVM, may live on).
    assert not [c for c in _children() if "bench-store-changelog" in c]


def _children() -> list[str]:
    """Command lines of this process's live children (from /proc)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
            found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


# -- metrics ---------------------------------------------------------------------------------
def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """``{sample name: {labels: value}}`` of one scrape, parsed by the Prometheus client's
    own parser."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with direct.open(url, timeout=30) as answer:
        text = answer.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def test_the_metrics_endpoint_reports_applied_records_lag_and_state_as_kafka_has_them(
    kafka_broker: Any,
    writer: ChangelogWriter,
    tmp_path: Path,
    following: Callable[[list[str]], FollowProcess],
) -> None:
    """Against ground truth: applied = records produced, lag 0 in every partition once the
    store's offsets are the changelog's end offsets (read from Kafka), state RUNNING once
    caught up, one commit observation per store commit; and applied follows new changes."""
    from confluent_kafka import Consumer, TopicPartition

    from tests.kafka_util import poll_until

    rng = random.Random(38)
    for _ in range(4):
        writer.transaction(random_changes(rng, 25))
    path = tmp_path / "store"
    bootstrap = kafka_broker.bootstrap_servers
    process = following(
        follow_command(
            bootstrap, writer.topic, path, "--no-progress", "--chunk-records", "10",
            "--metrics-port", "0",
        )
    )  # fmt: skip
    url = process.wait_for("metrics at ").split("metrics at ")[1].strip()
    process.wait_for("caught up")
    labels = (("store", str(path)), ("topic", writer.topic))

    def lag_free() -> dict[str, dict[tuple[tuple[str, str], ...], float]] | None:
        samples = scrape(url)
        lags = samples.get("spark_statestore_follower_records_lag", {})
        return samples if len(lags) == PARTITIONS and not any(lags.values()) else None

    samples = poll_until(lag_free, timeout_s=60, interval_s=0.2, failure=lambda: scrape(url))
    assert samples["spark_statestore_follower_records_applied_total"][labels] == 100
    assert set(samples["spark_statestore_follower_records_lag"]) == {
        (("partition", str(p)), *labels) for p in range(PARTITIONS)
    }
    state = samples["spark_statestore_follower_state"]
    assert state[(("state", "running"), *labels)] == 1.0
    assert state[(("state", "restoring"), *labels)] == 0.0
    assert samples["spark_statestore_follower_restore_remaining_records"][labels] == 0
    assert samples["spark_statestore_follower_commit_seconds_count"][labels] >= 100 / 10

    writer.transaction(random_changes(rng, 20))

    def applied_all() -> float | None:
        value = scrape(url)["spark_statestore_follower_records_applied_total"][labels]
        return value if value == 120 else None

    poll_until(applied_all, timeout_s=60, interval_s=0.2, failure=lambda: scrape(url))
    assert process.stop(signal.SIGTERM) == 0
    # Lag 0 meant this: the store's offsets are the changelog's end offsets.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "metrics-check"})
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(writer.topic, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()
    assert store_content(path)[1] == ends


def test_a_metrics_host_beyond_loopback_is_refused(
    kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path
) -> None:
    writer.transaction(random_changes(random.Random(1), 3))
    done = follow(
        kafka_broker.bootstrap_servers, writer.topic, tmp_path / "store",
        "--metrics-port", "0", "--metrics-host", "0.0.0.0",
    )  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert "metrics host '0.0.0.0' is beyond loopback" in done.stderr
