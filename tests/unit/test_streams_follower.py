"""The wrapper of the interop jar's FollowerApp refuses what the app cannot run, before a
JVM starts."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_the_follower_wrapper_refuses_what_the_app_cannot_run(tmp_path: Path) -> None:
    from spark_statestore.connectors.kafka.errors import StreamsAppError
    from spark_statestore.connectors.kafka.local.streams_app import StreamsFollower

    state = tmp_path / "state"
    with pytest.raises(StreamsAppError, match="kind must be 'readonly' or 'global'"):
        StreamsFollower("127.0.0.1:1", state, follow={"s": ("t", "string")}, kind="table")
    with pytest.raises(StreamsAppError, match=r"store 's' \(topic 't'\).*got 'json'"):
        StreamsFollower("127.0.0.1:1", state, follow={"s": ("t", "json")}, kind="global")
