"""Finding or starting the store host of the Spark driver this process runs under.

Called on the driver's host by what plans a read or a write (Spark's planning processes and
the sink's commit processes are the driver JVM's children). The first caller starts the
host (a detached process in a session of its own that watches the driver JVM) and records it
owner-only (:mod:`.record`); later callers reuse it. A host that died is started again on the
same address, port, token and certificate, so what earlier plans carry still reaches it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
from typing import Any

from spark_statestore.connectors.spark.detached import start_detached
from spark_statestore.connectors.spark.driver import (
    Deployment,
    ProcessId,
    driver_deployment,
    spark_jvm,
)
from spark_statestore.connectors.spark.errors import SparkSourceError
from spark_statestore.connectors.spark.host.record import (
    HostRecord,
    HostRef,
    read_record,
    record_path,
    write_record,
)

__all__ = [
    "METRICS_PORT_VARIABLE",
    "PORT_VARIABLE",
    "START_TIMEOUT_S",
    "driver_store_host",
    "ensure_store_host",
    "start_store_host",
]

_log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0


def driver_store_host() -> HostRecord | None:
    """The record of this process's Spark driver's store host (started when none runs), for
    the driver's own processes (a sink commit); None outside a Spark driver."""
    driver = spark_jvm()
    if driver is None:
        return None
    return start_store_host(driver, driver_deployment())


def ensure_store_host() -> HostRef | None:
    """How executors reach the store host of this process's Spark driver, starting it when
    none runs; None outside a Spark driver (a direct call: the caller is on the store's host
    and reads or writes the store itself).

    Raises
    ------
    SparkSourceError
        If the host cannot start.
    """
    driver = spark_jvm()
    if driver is None:
        return None
    return start_store_host(driver, driver_deployment()).ref


def start_store_host(driver: ProcessId, deployment: Deployment) -> HostRecord:
    """The live store host of ``driver``, started (again) when none runs."""
    lock_path = record_path(driver) + ".lock"
    from spark_statestore.store.files import open_private

    fd = open_private(lock_path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        record = read_record(driver)
        if record is not None and record.process.alive():
            return record
        record = _start(driver, deployment, record)
        write_record(record)
        return record
    finally:
        os.close(fd)  # releases the lock


def _start(driver: ProcessId, deployment: Deployment, previous: HostRecord | None) -> HostRecord:
    from spark_statestore.serve.auth import new_token
    from spark_statestore.serve.certificates import (
        self_signed_certificate,
        self_signed_client_certificate,
    )
    from spark_statestore.serve.mutual_tls import OWN_CLIENT_NAME

    host = deployment.host if previous is None else previous.host
    token = new_token() if previous is None else previous.ref.token
    commit_token = (
        new_token() if previous is None or previous.commit_token is None else previous.commit_token
    )
    tls: tuple[bytes, bytes] | None = None
    # A host on TLS is in mutual-TLS mode with the one client certificate the plans carry:
    # a peer without it never gets a message buffered (gRPC reads a whole message before
    # the token is checked).
    client: tuple[bytes, bytes] | None = None
    if previous is not None and previous.ref.tls_root_certs is not None:
        assert previous.tls_key is not None
        tls = (previous.ref.tls_root_certs, previous.tls_key)
        if previous.ref.tls_client_cert is not None and previous.ref.tls_client_key is not None:
            client = (previous.ref.tls_client_cert, previous.ref.tls_client_key)
    elif previous is None and not deployment.executors_local:
        tls = self_signed_certificate([host], common_name="spark-statestore store host")
        client = self_signed_client_certificate(common_name=OWN_CLIENT_NAME)
    ports = [_configured_port(PORT_VARIABLE) or 0] if previous is None else [previous.port, 0]
    metrics_port = _configured_port(METRICS_PORT_VARIABLE)
    errors = []
    for port in ports:
        reply, process = _launch(driver, host, port, token, tls, client, metrics_port, commit_token)
        if "ready" in reply:
            pid = ProcessId.of(process.pid)
            if pid is None:
                raise SparkSourceError(f"the store host (pid {process.pid}) exited right away")
            if previous is not None and port == 0:
                _log.warning(
                    "the store host of the Spark driver (pid %d) could not listen on port %d "
                    "again: plans made before it restarted cannot reach it",
                    driver.pid,
                    previous.port,
                )
            metrics = reply.get("metrics")
            _log.info(
                "started the store host %s (pid %d)%s",
                reply["ready"],
                process.pid,
                "" if metrics is None else f", its metrics at {metrics}",
            )
            return HostRecord(
                pid,
                driver,
                host,
                int(reply["port"]),
                HostRef(
                    str(reply["ready"]),
                    token,
                    None if tls is None else tls[0],
                    *(client or (None, None)),
                ),
                None if tls is None else tls[1],
                None if metrics is None else str(metrics),
                commit_token,
            )
        errors.append(str(reply.get("error", reply)))
    raise SparkSourceError(
        f"the store host of the Spark driver (pid {driver.pid}) did not start on {host}: "
        f"{'; '.join(errors)} (its log: {_log_path(driver)})"
    )


PORT_VARIABLE = "SPARK_STATESTORE_HOST_PORT"
"""The environment variable (of the Spark driver) fixing the store host's port, for a firewall
between executors and the driver; unset or 0: any free port."""
METRICS_PORT_VARIABLE = "SPARK_STATESTORE_HOST_METRICS_PORT"
"""The environment variable (of the Spark driver) asking the store host to serve its metrics
on this loopback port (0: a free one); unset: no metrics endpoint. The host logs the URL and
its record (:mod:`.record`) keeps it."""


def _configured_port(variable: str) -> int | None:
    """The port environment variable ``variable`` says (None: unset or empty)."""
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) > 65535:
        raise SparkSourceError(
            f"environment variable {variable}={raw!r} is not a port number (0-65535)"
        )
    return int(raw)


def _log_path(driver: ProcessId) -> str:
    return record_path(driver).replace(".json", ".log")


def _launch(
    driver: ProcessId,
    host: str,
    port: int,
    token: str,
    tls: tuple[bytes, bytes] | None,
    client: tuple[bytes, bytes] | None,
    metrics_port: int | None,
    commit_token: str,
) -> tuple[dict[str, Any], subprocess.Popen[bytes]]:
    request = {
        "host": host,
        "port": port,
        "token": token,
        "tls": None if tls is None else [tls[0].decode("ascii"), tls[1].decode("ascii")],
        # The one client certificate the host accepts (only the key's holders have it).
        "tls_client_ca": None if client is None else client[0].decode("ascii"),
        "watch": [driver.pid, driver.start],
        "metrics_port": metrics_port,
        "commit_token": commit_token,
    }
    return start_detached(
        "spark_statestore.connectors.spark.host", request, _log_path(driver), START_TIMEOUT_S
    )
