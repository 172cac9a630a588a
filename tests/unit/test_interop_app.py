"""The Kafka Streams interop app is pinned to the broker's Kafka version; its launchers build
the apps' command lines and refuse what the apps cannot run, before a JVM starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spark_statestore.connectors.kafka.local.jars import KAFKA_VERSION

POM = Path(__file__).resolve().parents[2] / "interop" / "kafka-streams" / "pom.xml"


def test_the_app_builds_against_the_broker_s_kafka_version() -> None:
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text())
    assert match is not None and match.group(1) == KAFKA_VERSION


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
