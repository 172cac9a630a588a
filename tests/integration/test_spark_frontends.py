"""Spark's own front ends know ``spark_statestore`` after the README's setup, with no code.

A SQL-only client cannot call :func:`spark_statestore.register`: Spark must find the data
source by itself (its lookup lists top-level ``pyspark_*`` modules), although the setup
installs the project in editable mode, which hides packages from that listing. The scripts
the setup puts in ``.venv/bin`` must also work without an activated virtualenv (they start
Python as ``python3`` from ``PATH`` unless the setup points them at the venv's).

Both tests run the venv's scripts with no ``PYSPARK_PYTHON``, the venv's ``bin`` removed from
``PATH`` (after the setup; kept first for a wheel install, see :func:`user_env`), in a
directory outside the checkout, so nothing of the project is importable but what the install
provides: ``spark-sql -e``, and the Thrift JDBC server
(``HiveThriftServer2``, what BI tools connect to) queried with ``beeline``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_statestore.connectors.local.processes import free_ports, launch, log_tail
from spark_statestore.store import Role, Store, StoreSpec
from tests.conftest import CHECKOUT_UNDER_TEST

pytestmark = [pytest.mark.integration, pytest.mark.beside]

VENV_BIN = Path(sys.executable).parent
SQL = (
    "CREATE TEMPORARY VIEW v USING spark_statestore OPTIONS (path '{path}', "
    "keyFormat 'string', valueFormat 'string'); "
    "SELECT key, value, offset FROM v ORDER BY key"
)
SPARK_CONF = [
    "--master",
    "local[1]",
    "--conf",
    "spark.driver.host=127.0.0.1",
    "--conf",
    "spark.driver.bindAddress=127.0.0.1",
    "--conf",
    "spark.ui.enabled=false",
]
START_TIMEOUT_S = 180.0


def user_env() -> dict[str, str]:
    """A user's shell: after the README's setup, one that never activated the virtualenv;
    with the wheels installed elsewhere (scripts/dist-check.sh), one that activated it, as
    README's "Installing from wheels" says (a plain virtualenv's scripts start `python3`
    from PATH)."""
    others = [
        entry
        for entry in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
        if entry and Path(entry).resolve() != VENV_BIN.resolve()
    ]
    path = os.pathsep.join(others if CHECKOUT_UNDER_TEST else [str(VENV_BIN), *others])
    env = {"PATH": path or "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return env


def run_as_user(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run one of the venv's scripts as :func:`user_env`'s user; it must succeed."""
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env=user_env(), cwd=cwd
    )
    assert done.returncode == 0, (
        f"{Path(command[0]).name} failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    )
    return done


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with Store.open(path, StoreSpec(Role.FOLLOWER, "t", 1)) as opened, opened.begin() as txn:
        txn.put(b"a", b"1", partition=0, offset=0)
        txn.put(b"b", b"2", partition=0, offset=1)
        txn.put(b"gone", b"x", partition=0, offset=2)
        txn.delete(b"gone")
        txn.set_changelog_offset(0, 3)
    return path


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Outside the checkout: its pyspark_statestore/ must not be importable from the cwd."""
    path = tmp_path / "cwd"
    path.mkdir()
    return path


def test_spark_sql_cli_finds_the_data_source(store: Path, workdir: Path) -> None:
    done = run_as_user(
        [str(VENV_BIN / "spark-sql"), *SPARK_CONF, "-e", SQL.format(path=store)], workdir
    )
    rows = [line.split("\t") for line in done.stdout.splitlines() if line.strip()]
    assert rows == [["a", "1", "0"], ["b", "2", "1"]], done.stdout


@pytest.fixture
def thrift_server(workdir: Path) -> Iterator[int]:
    """Spark's Thrift JDBC server on 127.0.0.1, started from the venv's scripts."""
    (port,) = free_ports("127.0.0.1", 1)
    log = workdir / "thrift-server.log"
    process = launch(
        [
            str(VENV_BIN / "spark-submit"),
            "--class",
            "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2",
            *SPARK_CONF,
            "spark-internal",
            "--hiveconf",
            f"hive.server2.thrift.port={port}",
            "--hiveconf",
            "hive.server2.thrift.bind.host=127.0.0.1",
        ],
        log,
        env=user_env(),
        cwd=workdir,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"the Thrift server exited with {process.returncode}:\n{log_tail(log)}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the Thrift server did not listen on {port}:\n{log_tail(log)}")
                time.sleep(0.2)  # polling the port: the server says nothing else when ready
        yield port
    finally:
        process.kill()
        process.wait()


def test_thrift_server_answers_a_jdbc_client(
    thrift_server: int, store: Path, workdir: Path
) -> None:
    done = run_as_user(
        [
            str(VENV_BIN / "beeline"),
            "-u",
            f"jdbc:hive2://127.0.0.1:{thrift_server}",
            "-n",
            "analyst",
            "--silent=true",
            "--outputformat=csv2",
            "-e",
            SQL.format(path=store),
        ],
        workdir,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    header = lines.index("key,value,offset")
    assert lines[header + 1 :] == ["a,1,0", "b,2,1"], done.stdout
