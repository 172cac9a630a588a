"""Integration fixtures: one local SparkSession for the whole session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A session-scoped local[2] SparkSession (UI off, 2 shuffle partitions, UTC)."""
    import spark_statestore
    from spark_statestore.connectors.spark.session import local_session

    session = local_session("spark-statestore-tests")
    # Editable installs hide top-level modules from pkgutil, so Spark's automatic
    # registration (pyspark_statestore) only works from a real install; see
    # tests/integration/test_registration.py for that path.
    spark_statestore.register(session)
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
