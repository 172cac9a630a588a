"""Architecture rules that are easy to break silently."""

from __future__ import annotations

import json
import subprocess
import sys


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
