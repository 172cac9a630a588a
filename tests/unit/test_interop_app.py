"""The Kafka Streams interop app is pinned to the broker's Kafka version."""

from __future__ import annotations

import re
from pathlib import Path

from spark_statestore.connectors.kafka.local.jars import KAFKA_VERSION

POM = Path(__file__).resolve().parents[2] / "interop" / "kafka-streams" / "pom.xml"


def test_the_app_builds_against_the_broker_s_kafka_version() -> None:
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text())
    assert match is not None and match.group(1) == KAFKA_VERSION
