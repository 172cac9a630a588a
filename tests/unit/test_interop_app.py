"""The Kafka Streams interop app is pinned to the broker's Kafka version; its launchers build
the apps' command lines and refuse what the apps cannot run, before a JVM starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spark_statestore.connectors.kafka.local.jars import KAFKA_VERSION
from tests.conftest import requires_checkout

POM = Path(__file__).resolve().parents[2] / "interop" / "kafka-streams" / "pom.xml"


def test_the_app_builds_against_the_broker_s_kafka_version() -> None:
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text())
    assert match is not None and match.group(1) == KAFKA_VERSION


@requires_checkout  # the app's default build directory is the checkout's
def test_the_broker_and_streams_versions_default_to_the_pinned_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spark_statestore.connectors.kafka.local.jars import ENV_BROKER_VERSION, kafka_jars
    from spark_statestore.connectors.kafka.local.streams_build import (
        ENV_STREAMS_VERSION,
        has_headers_stores,
        interop_app_dir,
    )

    monkeypatch.delenv(ENV_BROKER_VERSION, raising=False)
    monkeypatch.delenv(ENV_STREAMS_VERSION, raising=False)
    monkeypatch.delenv("SPARK_STATESTORE_INTEROP_APP", raising=False)
    assert kafka_jars().coordinates == (
        f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
        "org.apache.logging.log4j:log4j-slf4j-impl:2.25.4",
    )
    assert interop_app_dir() == POM.parent / "target"
    assert has_headers_stores()


@requires_checkout  # the app's default build directory is the checkout's
def test_other_versions_pick_their_own_jars_and_app_build(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_statestore.connectors.kafka.local.jars import ENV_BROKER_VERSION, kafka_jars
    from spark_statestore.connectors.kafka.local.streams_build import (
        ENV_STREAMS_VERSION,
        has_headers_stores,
        interop_app_dir,
    )

    monkeypatch.delenv("SPARK_STATESTORE_INTEROP_APP", raising=False)
    monkeypatch.setenv(ENV_BROKER_VERSION, "3.9.2")
    monkeypatch.setenv(ENV_STREAMS_VERSION, "4.0.2")
    assert kafka_jars().coordinates == (
        "org.apache.kafka:kafka_2.13:3.9.2",
        "org.slf4j:slf4j-reload4j:1.7.36",
    )
    assert kafka_jars().directory.name == "kafka-3.9.2"
    assert kafka_jars("4.4.0").coordinates[0] == "org.apache.kafka:kafka_2.13:4.4.0"
    assert interop_app_dir() == POM.parent / "target-4.0.2"
    assert not has_headers_stores() and has_headers_stores("4.4.0")


def test_an_unbuilt_app_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_statestore.connectors.kafka.errors import JarsMissingError
    from spark_statestore.connectors.kafka.local.streams_app import ENV_APP, StreamsApp

    monkeypatch.setenv(ENV_APP, str(tmp_path / "target"))
    with pytest.raises(JarsMissingError, match=r"not built in .*target.*mvn -B -q -f interop"):
        StreamsApp("127.0.0.1:1", tmp_path / "state")


def test_query_keys_cannot_break_the_request_line(tmp_path: Path) -> None:
    from spark_statestore.connectors.kafka.errors import StreamsAppError
    from spark_statestore.connectors.kafka.local.streams_app import StreamsApp

    app = StreamsApp("127.0.0.1:1", tmp_path / "state")  # built by the setup; not started
    with pytest.raises(StreamsAppError, match="keys and arguments without spaces"):
        app.query("key", "totals", "a b")
    with pytest.raises(StreamsAppError, match="without spaces, got '1 2'"):
        app.query("vkey", "versions", "a", args=["1 2"])
    with pytest.raises(StreamsAppError, match="not running"):
        app.query("key", "totals", "a")


def test_the_shapes_app_gets_its_inputs_shapes_and_settings(tmp_path: Path) -> None:
    from spark_statestore.connectors.kafka.errors import StreamsAppError
    from spark_statestore.connectors.kafka.local.shapes_app import SHAPES_APP, StreamsShapes

    app = StreamsShapes(
        "127.0.0.1:1",
        tmp_path / "state",
        inputs={"orders": "o", "customers": "c"},
        shapes=["chained", "regroup", "chained"],
        position_headers=False,
        window_ms=250,
        settings={"commit-interval-ms": 50},
    )
    arguments = app.command[app.command.index(SHAPES_APP) + 1 :]
    assert dict(zip(arguments[::2], arguments[1::2], strict=True)) == {
        "--bootstrap-servers": "127.0.0.1:1",
        "--state-dir": str(tmp_path / "state"),
        "--application-id": "interop-shapes",
        "--position-headers": "false",
        "--orders-topic": "o",
        "--customers-topic": "c",
        "--shapes": "chained,regroup",
        "--window-ms": "250",
        "--commit-interval-ms": "50",
    }
    assert app.changelog("regroup") == "interop-shapes-regroup-changelog"
    with pytest.raises(StreamsAppError, match="has not described its topology"):
        _ = app.topology


def test_the_shapes_app_refuses_unknown_shapes_and_inputs(tmp_path: Path) -> None:
    from spark_statestore.connectors.kafka.errors import StreamsAppError
    from spark_statestore.connectors.kafka.local.shapes_app import StreamsShapes

    state = tmp_path / "state"
    with pytest.raises(StreamsAppError, match="unknown shape 'regrop'; did you mean 'regroup'"):
        StreamsShapes("127.0.0.1:1", state, inputs={}, shapes=["regrop"])
    with pytest.raises(StreamsAppError, match="unknown input 'order'; did you mean 'orders'"):
        StreamsShapes("127.0.0.1:1", state, inputs={"order": "o"})
    with pytest.raises(StreamsAppError, match="no shape to run"):
        StreamsShapes("127.0.0.1:1", state, inputs={}, shapes=[])
