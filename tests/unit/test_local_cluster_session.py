"""A local Spark cluster's session needs a fresh driver JVM: one started for an earlier,
stopped session keeps that session's settings (where executors run, the driver's address)."""

from __future__ import annotations

import pytest
from pyspark import SparkContext

from spark_statestore.connectors.spark.errors import LocalSparkError
from spark_statestore.connectors.spark.local import LocalSparkCluster


def test_a_driver_jvm_left_by_a_stopped_session_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(SparkContext, "_gateway", object())
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    with pytest.raises(LocalSparkError, match="fresh process"):
        LocalSparkCluster(workers=1).session("refused")
