"""Relative paths in options resolve against the working directory of the Spark JVM above the
process, as Spark resolves its own (under Spark Connect, Python workers work elsewhere)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spark_statestore.connectors.spark.options import parse_sink_options
from spark_statestore.connectors.spark.paths import resolve_local_path

# A child that parses options in a directory of its own, as a Connect data source worker does.
WORKER = """
import json, os, sys
os.chdir(sys.argv[1])
from spark_statestore.connectors.spark.options import parse_sink_options
from spark_statestore.connectors.spark.paths import spark_working_directory
options = parse_sink_options(
    {"path": "stores/s", "checkpointLocation": "cp/q", "serve": "true",
     "serveTokenFile": "token"},
    streaming=True,
)
print(json.dumps({
    "base": spark_working_directory(),
    "path": options.path,
    "checkpoint": options.checkpoint.location.path,
    "token": options.serve.token_file,
}))
"""

# Stands in for Spark's JVM: a process named "java" that starts the worker from its own
# working directory.
JVM = """
import subprocess, sys
done = subprocess.run([sys.argv[1], "-c", sys.argv[2], sys.argv[3]], capture_output=True,
                      text=True, check=True)
print(done.stdout, end="")
"""


def test_absolute_paths_and_uris_are_kept() -> None:
    assert resolve_local_path("/data/stores/s") == "/data/stores/s"
    for uri in ("file:/tmp/cp", "file:///tmp/cp", "hdfs://nn:8020/cp", "s3a://bucket/cp"):
        assert resolve_local_path(uri) == uri


def test_without_a_jvm_above_a_relative_path_is_this_process_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    options = parse_sink_options({"path": "s", "checkpointLocation": "cp"}, streaming=True)
    assert options.checkpoint is not None
    assert (options.path, options.checkpoint.location.path) == (
        str(tmp_path / "s"),
        str(tmp_path / "cp"),
    )


def test_a_worker_resolves_against_the_jvm_s_directory_not_its_own(tmp_path: Path) -> None:
    jvm_dir, worker_dir = tmp_path / "jvm", tmp_path / "session-artifacts"
    jvm_dir.mkdir()
    worker_dir.mkdir()
    (tmp_path / "bin").mkdir()
    java = tmp_path / "bin" / "java"  # /proc/<pid>/comm is the executable's name
    java.symlink_to(sys.executable)
    (jvm_dir / "token").write_text("t" * 32)
    done = subprocess.run(
        [str(java), "-c", JVM, sys.executable, textwrap.dedent(WORKER), str(worker_dir)],
        capture_output=True,
        text=True,
        cwd=jvm_dir,
        env=dict(os.environ),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {
        "base": str(jvm_dir),
        "path": str(jvm_dir / "stores" / "s"),
        "checkpoint": str(jvm_dir / "cp" / "q"),
        "token": str(jvm_dir / "token"),
    }
