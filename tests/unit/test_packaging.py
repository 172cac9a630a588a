"""Architecture rules that are easy to break silently."""

from __future__ import annotations

import ctypes.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from spark_statestore.connectors.kafka import _librdkafka
from spark_statestore.connectors.kafka.errors import LibrdkafkaNotFoundError
from spark_statestore.errors import StateStoreError


def test_importing_the_engine_loads_no_spark_kafka_or_storage_library() -> None:
    code = (
        "import sys, threading, json\n"
        "import spark_statestore, spark_statestore.query, spark_statestore.changelog\n"
        "import spark_statestore.cli, spark_statestore.demo\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('pyspark', 'confluent_kafka', 'plyvel', 'pyarrow', 'py4j')]\n"
        "print(json.dumps({'heavy': heavy, 'threads': threading.active_count()}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    facts = json.loads(out)
    assert facts == {"heavy": [], "threads": 1}


def test_missing_librdkafka_file_gives_an_actionable_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(_librdkafka.ENV_OVERRIDE, str(tmp_path / "librdkafka.so.1"))
    with pytest.raises(LibrdkafkaNotFoundError) as err:
        _librdkafka.find_librdkafka()
    assert isinstance(err.value, StateStoreError)
    assert "pip install 'confluent-kafka>=2.6'" in str(err.value)
    assert _librdkafka.ENV_OVERRIDE in str(err.value)


def test_a_library_without_the_mock_api_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = ctypes.util.find_library("c")
    if libc is None:  # pragma: no cover - every Linux has a libc
        pytest.skip("no libc to point at")
    monkeypatch.setenv(_librdkafka.ENV_OVERRIDE, libc)
    with pytest.raises(LibrdkafkaNotFoundError, match="missing symbols rd_kafka_"):
        _librdkafka.find_librdkafka()


def test_the_bundled_librdkafka_is_found() -> None:
    path = _librdkafka.find_librdkafka()
    assert "rdkafka" in path.name
