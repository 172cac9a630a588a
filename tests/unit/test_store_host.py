"""The store host without Spark or Kafka: staging a task's rows over Flight (whole or absent),
scans and lookups of a store as it is now with their position, who may call it, its TLS with
a self-signed certificate, and its life as a process (found, restarted where plans expect it
after a SIGKILL, gone with its driver). Also where executors run, read from a driver's
command line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_statestore.connectors.spark.driver import (
    Deployment,
    ProcessId,
    driver_deployment,
    driver_settings,
    executors_are_local,
    parse_submit_arguments,
)
from spark_statestore.connectors.spark.host import HostRef, StoreHostClient
from spark_statestore.connectors.spark.host.launch import start_store_host
from spark_statestore.connectors.spark.host.record import read_record
from spark_statestore.connectors.spark.host.server import StoreHostServer
from spark_statestore.connectors.spark.serve_options import serving_address
from spark_statestore.position import Position, PositionBound
from spark_statestore.serve.certificates import (
    self_signed_certificate,
    self_signed_client_certificate,
)
from spark_statestore.serve.errors import (
    AuthenticationError,
    BadRequestError,
    RemoteStoreError,
    ServerUnavailableError,
    TlsHandshakeError,
)
from spark_statestore.sink.staging import STAGING_DIR, StagingArea, staged_schema
from spark_statestore.store import Role, Store, StoreSpec
from spark_statestore.store.scan import ScanSpec
from tests.kafka_util import poll_until

TOKEN = "host-token-" + "x" * 32


def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait for another process to reach a state (it signals nothing we could wait on)."""
    poll_until(
        lambda: True if condition() else None,
        timeout_s=15,
        interval_s=0.05,
        failure=lambda: f"still not: {what}",
    )


def _rows(keys: list[bytes], values: list[bytes | None]) -> pa.RecordBatch:
    schema = staged_schema()
    columns = {
        "key": keys,
        "value": values,
        **{f.name: [None] * len(keys) for f in schema if f.name not in ("key", "value")},
    }
    return pa.RecordBatch.from_pydict(columns, schema=schema)


@pytest.fixture(params=["plain", "tls", "mutual-tls"])
def host(request: pytest.FixtureRequest) -> Iterator[HostRef]:
    tls = client = None
    if request.param != "plain":
        tls = self_signed_certificate(["127.0.0.1"], common_name="test store host")
    if request.param == "mutual-tls":
        client = self_signed_client_certificate(common_name="test task")
    server = StoreHostServer("127.0.0.1", 0, TOKEN, tls, None if client is None else client[0])
    yield HostRef(server.location, TOKEN, None if tls is None else tls[0], *(client or ()))
    server.close()


def _store(path: Path, rows: dict[bytes, bytes], position: dict[str, dict[int, int]]) -> None:
    with Store.open(path, StoreSpec(Role.LEADER, "c", 1)) as store, store.begin() as txn:
        for key, value in rows.items():
            txn.put(key, value, partition=0)
        txn.merge_position(Position.from_map(position))


def test_a_task_stages_its_rows_through_the_host(host: HostRef, tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    batches = [_rows([b"a", b"b"], [b"1", None]), _rows([b"c"], [b"3"])]
    with StoreHostClient(host) as client:
        staged = client.stage(store, "query-1", 7, 2, 1, batches)
    assert (staged.partition_id, staged.rows) == (2, 3)
    assert staged.name.startswith("query-1/7/part-00002-1-")
    read = pa.Table.from_batches(list(StagingArea(store).read(staged)))
    assert read.equals(pa.Table.from_batches(batches))


def test_a_task_that_dies_mid_stream_stages_nothing(host: HostRef, tmp_path: Path) -> None:
    store = str(tmp_path / "store")

    def dying() -> Iterator[pa.RecordBatch]:
        yield _rows([b"a"], [b"1"])
        raise RuntimeError("the task failed mid-batch")

    with StoreHostClient(host) as client, pytest.raises(RuntimeError, match="mid-batch"):
        client.stage(store, "query-1", 0, 0, 0, dying())
    # The host saw the stream end early: no file under a final name, no temporary left.
    batch_dir = tmp_path / "store" / STAGING_DIR / "query-1" / "0"
    _until(lambda: not batch_dir.exists() or not any(batch_dir.iterdir()), "no staged file")


def test_scans_and_lookups_read_the_store_as_it_is_now_with_its_position(
    host: HostRef, tmp_path: Path
) -> None:
    path = tmp_path / "store"
    _store(path, {b"a": b"1", b"b": b"2", b"c": b"3"}, {"orders": {0: 41}})
    bound = PositionBound.at(Position.from_map({"orders": {0: 41}}))
    with StoreHostClient(host) as client:
        with client.scan(str(path), ScanSpec.everything(), bound) as (position, batches):
            rows = pa.Table.from_batches(list(batches))
        assert position == Position.from_map({"orders": {0: 41}})
        assert rows.column("key").to_pylist() == [b"a", b"b", b"c"]
        table, looked_up = client.lookup(str(path), [b"c", b"zz", b"a"], bound)
    found = dict(
        zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True)
    )
    assert found == {b"a": b"1", b"c": b"3"}
    assert looked_up == position


def test_a_bound_the_store_has_not_reached_is_the_tasks_to_refuse(
    host: HostRef, tmp_path: Path
) -> None:
    path = tmp_path / "store"
    _store(path, {b"a": b"1"}, {"orders": {0: 5}})
    bound = PositionBound.at(Position.from_map({"orders": {0: 9}}))
    with StoreHostClient(host) as client:
        _, position = client.lookup(str(path), [b"a"], bound, wait_s=0.2)
    assert not bound.permits(position)  # the host waited, then answered with what it has


def test_tasks_and_commits_share_one_connection_until_a_call_fails(
    host: HostRef, tmp_path: Path
) -> None:
    """A reused Python worker's tasks (and a commit process's micro-batches) share one
    client per host; a failed call drops it, so the next dials the host anew."""
    from spark_statestore.connectors.spark.host.client import shared_client

    store = str(tmp_path / "store")
    first = shared_client(host)
    first.stage(store, "q", 0, 0, 0, [_rows([b"a"], [b"1"])])
    assert shared_client(host) is first
    with pytest.raises(BadRequestError, match="absolute path"):
        first.stage("relative/store", "q", 1, 0, 0, [_rows([b"a"], [b"1"])])
    second = shared_client(host)
    assert second is not first
    assert second.stage(store, "q", 1, 0, 0, [_rows([b"b"], [b"2"])]).rows == 1


def test_the_host_refuses_strangers_and_bad_requests(host: HostRef, tmp_path: Path) -> None:
    stranger = HostRef(
        host.location,
        "someone-else-" + "y" * 32,
        host.tls_root_certs,
        host.tls_client_cert,
        host.tls_client_key,
    )
    with StoreHostClient(stranger) as client, pytest.raises(AuthenticationError):
        client.lookup(str(tmp_path), [b"a"], PositionBound.unbounded())
    with StoreHostClient(host) as client:
        with pytest.raises(BadRequestError, match="absolute path"):
            client.stage("relative/store", "q", 0, 0, 0, [_rows([b"a"], [b"1"])])
        with pytest.raises(BadRequestError, match="not normalized"):
            client.lookup(str(tmp_path / "x" / ".." / "y"), [b"a"], PositionBound.unbounded())
        with pytest.raises(RemoteStoreError, match="StoreNotFoundError"):
            client.lookup(str(tmp_path / "missing"), [b"a"], PositionBound.unbounded())


def test_a_client_trusts_only_the_certificate_the_plan_carries(tmp_path: Path) -> None:
    tls = self_signed_certificate(["127.0.0.1"], common_name="the host")
    other, _ = self_signed_certificate(["127.0.0.1"], common_name="an impostor's")
    server = StoreHostServer("127.0.0.1", 0, TOKEN, tls)
    try:
        impostor = HostRef(server.location, TOKEN, other)
        with StoreHostClient(impostor) as client, pytest.raises(ServerUnavailableError):
            client.lookup(str(tmp_path), [b"a"], PositionBound.unbounded())
    finally:
        server.close()


def test_the_host_refuses_plain_text_beyond_loopback() -> None:
    with pytest.raises(Exception, match="TLS"):
        StoreHostServer("192.0.2.1", 0, TOKEN, None)


def _sleeper(*arguments: str) -> subprocess.Popen[str]:
    """A process that runs until killed, started with ``arguments`` on its command line, and
    up (it said so) when this returns."""
    script = "import sys, time; print('up', flush=True); time.sleep(600)"
    process = subprocess.Popen(
        [sys.executable, "-c", script, *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if line.strip() != "up":
        process.kill()
        _, errors = process.communicate()
        raise AssertionError(f"the helper process did not start: {line!r} {errors[-2000:]}")
    return process


@pytest.fixture
def fake_driver() -> Iterator[ProcessId]:
    """A process the store host watches as its Spark driver."""
    process = _sleeper()
    driver = ProcessId.of(process.pid)
    assert driver is not None
    yield driver
    process.kill()
    process.communicate()


def test_the_host_is_found_restarted_where_plans_expect_it_and_gone_with_its_driver(
    fake_driver: ProcessId, tmp_path: Path
) -> None:
    first = start_store_host(fake_driver, Deployment.local())
    assert start_store_host(fake_driver, Deployment.local()) == first  # found, not started
    assert read_record(fake_driver) == first
    os.kill(first.process.pid, signal.SIGKILL)
    _until(lambda: not first.process.alive(), "the killed host is gone")
    second = start_store_host(fake_driver, Deployment.local())
    assert second.process != first.process
    assert second.ref == first.ref  # same location, token: what plans carry still works
    with StoreHostClient(second.ref) as client:
        staged = client.stage(str(tmp_path / "s"), "q", 0, 0, 0, [_rows([b"k"], [b"v"])])
    assert staged.rows == 1
    os.kill(fake_driver.pid, signal.SIGKILL)
    _until(lambda: not second.process.alive(), "the host exits with its driver")


def test_a_host_for_executors_elsewhere_serves_mutual_tls_with_its_own_certificates(
    fake_driver: ProcessId, tmp_path: Path
) -> None:
    elsewhere = Deployment(False, "127.0.0.1", "spark://m:7077")
    record = start_store_host(fake_driver, elsewhere)
    try:
        assert record.ref.location.startswith("grpc+tls://127.0.0.1:")
        assert record.ref.tls_root_certs is not None and record.tls_key is not None
        assert record.ref.tls_client_cert is not None and record.ref.tls_client_key is not None
        with StoreHostClient(record.ref) as client:
            assert client.stage(str(tmp_path / "s"), "q", 0, 0, 0, [_rows([b"k"], [b"v"])]).rows
        # A peer with the token but without the plan's client certificate fails the TLS
        # handshake: the host never reads (nor buffers) a message of its.
        without = HostRef(record.ref.location, record.ref.token, record.ref.tls_root_certs)
        with (
            StoreHostClient(without) as client,
            pytest.raises(TlsHandshakeError, match="presented none"),
        ):
            client.lookup(str(tmp_path / "s"), [b"k"], PositionBound.unbounded())
        # Restarted, it takes the same client certificate: the plans made before still work.
        os.kill(record.process.pid, signal.SIGKILL)
        _until(lambda: not record.process.alive(), "the killed host is gone")
        planned, record = record.ref, start_store_host(fake_driver, elsewhere)
        assert record.ref == planned and read_record(fake_driver) == record
    finally:
        os.kill(record.process.pid, signal.SIGKILL)


def test_submit_arguments_say_the_master_and_the_driver_host() -> None:
    arguments = [
        "--master",
        "spark://10.0.0.1:7077",
        "--conf",
        "spark.driver.host=10.0.0.2",
        "--conf=spark.app.name=x=y",
        "pyspark-shell",
    ]
    assert parse_submit_arguments(arguments) == {
        "spark.master": "spark://10.0.0.1:7077",
        "spark.driver.host": "10.0.0.2",
        "spark.app.name": "x=y",
    }
    assert executors_are_local("local[2]") and executors_are_local("local")
    assert not executors_are_local("spark://h:7077") and not executors_are_local(None)
    assert not executors_are_local("local-cluster[2,1,1024]")  # other processes: their loopback


def test_the_driver_settings_come_from_its_command_line_then_its_defaults(tmp_path: Path) -> None:
    (tmp_path / "spark-defaults.conf").write_text(
        "# defaults\nspark.master  yarn\nspark.driver.host=10.9.9.9\nspark.executor.cores 2\n"
    )
    process = _sleeper(
        "org.apache.spark.deploy.SparkSubmit", "--conf", "spark.master=local[1]", "pyspark-shell"
    )
    try:
        driver = ProcessId.of(process.pid)
        assert driver is not None
        settings = driver_settings(driver, {"SPARK_CONF_DIR": str(tmp_path)})
        command_line = Path(f"/proc/{process.pid}/cmdline").read_bytes()
    finally:
        process.kill()
        process.communicate()
    assert settings is not None, command_line
    assert settings is not None
    assert settings["spark.master"] == "local[1]"  # the command line wins
    assert settings["spark.driver.host"] == "10.9.9.9"
    assert settings["spark.executor.cores"] == "2"


def test_without_a_spark_driver_everything_is_on_this_host() -> None:
    # pytest is not a JVM's child: no driver, executors (if any) are local.
    assert driver_deployment({}).executors_local
    remote = driver_deployment(
        {"SPARK_STATESTORE_EXECUTORS": "remote", "SPARK_LOCAL_IP": "10.1.2.3"}
    )
    assert remote == Deployment(False, "10.1.2.3", None)
    assert serving_address(None, None) == ("127.0.0.1", None)
    assert serving_address("10.0.0.7", None) == ("10.0.0.7", None)  # explicit: kept
