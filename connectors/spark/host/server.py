"""The store host: one process per Spark driver, on the driver's host, through which executors
reach the stores there without touching their files.

Executors may run on other hosts (their own disks, their own loopback), so everything a task
used to do to a store's files happens here instead, over Arrow Flight:

* **stage** (``DoPut``): a sink task streams its rows; they are written to the store's
  staging area exactly as a task on this host wrote them (a new file per task attempt,
  complete or absent), and the reply is the staged file the task names in its commit
  message. The commit (on this host) applies exactly the files named, as before.
* **scan** (``DoGet``): the rows of a store as it is now, through its live owner or a private
  checkpoint (:func:`~.reads.current_snapshot`); the stream's schema metadata says the
  snapshot's position, which the task checks against its bound.
* **lookup** (``DoExchange``): the values of a batch of keys, in one snapshot, for
  ``enrich``; its position likewise.

Every call carries the host's bearer token, which travels in the plan. Executors on other
hosts dial the driver's routable address over TLS, with the host's own self-signed
certificate as the only root they trust (it travels in the plan too), and present the
client certificate the driver made with it: a host on TLS is in mutual-TLS mode, so a peer
without that certificate fails the TLS handshake before gRPC reads any of its messages. The
host stops when the driver JVM is gone, or on SIGTERM.

It counts its calls by kind and status, timed, and the rows and bytes it staged; with a
metrics port (the driver's environment variable ``SPARK_STATESTORE_HOST_METRICS_PORT``, see
:mod:`.launch`) it serves them (:mod:`~spark_statestore.metrics.host_metrics`) on loopback
and logs where.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.spark.driver import ProcessId
from spark_statestore.connectors.spark.host.changelogs import HostChangelogs
from spark_statestore.connectors.spark.host.requests import (
    POSITION_METADATA,
    bad_request,
    decode_request,
    store_path,
)
from spark_statestore.connectors.spark.worker_gc import freeze_long_lived

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.metrics import MetricsServer

__all__ = ["POSITION_METADATA", "StoreHostServer", "main"]

_log = logging.getLogger(__name__)

DEFAULT_WAIT_S = 0.0
STAGE, SCAN, LOOKUP = "stage", "scan", "lookup"
"""The kinds of call a host answers (its metrics' ``kind``)."""


class StoreHostServer:
    """The Flight server of a store host.

    Parameters
    ----------
    host, port
        Where to listen (0: any free port).
    token
        The bearer token every call must carry.
    tls_certificates
        ``(certificate PEM, key PEM)``; required beyond loopback.
    tls_client_ca
        PEM certificates of the client certificates (or their CAs) the host accepts: mutual
        TLS, a client without one fails the TLS handshake (with ``tls_certificates``).
    metrics_port
        Serve the host's metrics on this loopback port (0: a free one; see
        :attr:`metrics_url`); None: no endpoint.
    """

    def __init__(
        self,
        host: str,
        port: int,
        token: str,
        tls_certificates: tuple[bytes, bytes] | None,
        tls_client_ca: bytes | None = None,
        *,
        metrics_port: int | None = None,
        commit_token: str | None = None,
    ) -> None:
        from spark_statestore.serve.auth import check_token, require_tls_beyond_loopback
        from spark_statestore.serve.calls import CallStats
        from spark_statestore.serve.errors import ServerConfigError

        require_tls_beyond_loopback(host, tls_certificates is not None, names="the store host")
        if tls_client_ca is not None and tls_certificates is None:
            raise ServerConfigError("the store host: mutual TLS (tls_client_ca) needs TLS")
        self.token = check_token(token)
        self.host = host
        self.stopped = threading.Event()
        self.calls = CallStats((STAGE, SCAN, LOOKUP))
        """Its calls by kind and status (counted by the service as it answers them)."""
        self._staged_lock = threading.Lock()
        self._staged_rows = 0
        self._staged_bytes = 0
        self._commit_token = commit_token
        self.metrics: MetricsServer | None = None
        scheme = "grpc+tcp" if tls_certificates is None else "grpc+tls"
        bracketed = f"[{host}]" if ":" in host else host
        self._service = _service_class()(
            f"{scheme}://{bracketed}:{port}", self, tls_certificates, tls_client_ca
        )
        self.port: int = self._service.port
        self.location = f"{scheme}://{bracketed}:{self.port}"
        # The stores' changelogs it publishes while their tasks stage (the commit's calls
        # carry the commit token; the tasks' token, in the plan, lets nobody publish).
        self.changelogs = HostChangelogs(self.location, commit_token)
        self._thread = threading.Thread(target=self._service.wait, name="store-host", daemon=True)
        self._thread.start()
        _log.info("store host serving at %s", self.location)
        if metrics_port is not None:
            try:
                self.metrics = self._serve_metrics(metrics_port)
            except BaseException:
                self.close()
                raise

    @property
    def metrics_url(self) -> str | None:
        """Where the host serves its metrics, or None."""
        return None if self.metrics is None else self.metrics.url

    def _serve_metrics(self, port: int) -> MetricsServer:
        from prometheus_client.registry import CollectorRegistry

        from spark_statestore.metrics import HostMetrics, MetricsServer

        registry = CollectorRegistry()
        HostMetrics(self, registry)
        metrics = MetricsServer(registry, port=port)
        _log.info("store host metrics at %s", metrics.url)
        return metrics

    def staged_totals(self) -> tuple[int, int]:
        """Rows and bytes staged through this host so far."""
        with self._staged_lock:
            return self._staged_rows, self._staged_bytes

    def published_totals(self) -> dict[str, tuple[int, int]]:
        """Per changelog topic, the batches this host published: while staged, at commit."""
        return self.changelogs.published_totals()

    # -- handlers (on gRPC threads) ---------------------------------------------------------
    def stage(self, request: Mapping[str, Any], batches: Iterator[pa.RecordBatch]) -> bytes:
        """Write a task's rows into its store's staging area; the staged file, as JSON."""
        from spark_statestore.sink.staging import StagingArea

        store = store_path(request)
        numbers = {}
        for name in ("batch_id", "partition_id", "attempt"):
            value = request.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise bad_request(f"stage: {name} must be an int >= 0, got {value!r}")
            numbers[name] = value
        query_id = request.get("query_id")
        if not isinstance(query_id, str):
            raise bad_request("stage: query_id must be a string")
        streaming = self.changelogs.streaming(
            store, query_id, numbers["batch_id"], numbers["partition_id"], numbers["attempt"]
        )
        publish = None
        if streaming is not None:
            changelog, handle = streaming

            def publish(
                batch: pa.RecordBatch, max_offsets: Mapping[str, Mapping[int, int]]
            ) -> None:
                changelog.produce(handle, batch, max_offsets)

        try:
            staged = StagingArea(store).stage(
                query_id,
                numbers["batch_id"],
                numbers["partition_id"],
                numbers["attempt"],
                batches,
                publish,
            )
        except BaseException:
            if streaming is not None:
                streaming[0].broken(streaming[1])
            raise
        if streaming is not None:
            streaming[0].staged(streaming[1], staged)
        with self._staged_lock:
            self._staged_rows += staged.rows
            self._staged_bytes += staged.size
        _log.info("staged %d rows for %s: %s", staged.rows, store, staged.name)
        return json.dumps(staged.to_json()).encode()

    @contextlib.contextmanager
    def snapshot(self, request: Mapping[str, Any], what: str) -> Iterator[Any]:
        """The store's current snapshot for a scan request."""
        from spark_statestore.connectors.spark.host.reads import current_snapshot

        store, bound, wait_s = self._read_request(request, what)
        purpose = f"spark_statestore store host {what} (pid {os.getpid()})"
        with current_snapshot(store, purpose=purpose, bound=bound, wait_s=wait_s) as s:
            yield s

    def lookup(self, request: Mapping[str, Any], keys: Any) -> tuple[Any, Any]:
        """``(rows, position)`` of ``keys`` (an Arrow binary array) in one snapshot of the
        store as it is now (through its live owner in one call, or a private checkpoint)."""
        from spark_statestore.connectors.spark.host.reads import lookup_current

        store, bound, wait_s = self._read_request(request, "lookup")
        purpose = f"spark_statestore store host lookup (pid {os.getpid()})"
        framed_ids = request.get("framed_ids")
        if framed_ids is not None and (
            not isinstance(framed_ids, list)
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in framed_ids)
        ):
            raise bad_request(
                f"lookup: framed_ids must be a list of schema ids, got {framed_ids!r}"
            )
        return lookup_current(
            store,
            keys,
            purpose=purpose,
            bound=bound,
            wait_s=wait_s,
            framed_ids=None if framed_ids is None else frozenset(framed_ids),
        )

    def _read_request(self, request: Mapping[str, Any], what: str) -> tuple[str, Any, float]:
        """The store, bound and wait (capped at 600 s) of a scan or lookup request."""
        from spark_statestore.position import PositionBound

        store = store_path(request)
        raw_bound = request.get("bound")
        try:
            bound = (
                PositionBound.unbounded()
                if raw_bound is None
                else PositionBound.from_dict(raw_bound)
            )
        except Exception as exc:  # a StateStoreError or a type error from a bad body
            raise bad_request(f"{what}: bad bound {str(raw_bound)[:200]!r}: {exc}") from exc
        wait_s = request.get("wait_s", DEFAULT_WAIT_S)
        if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or wait_s < 0:
            raise bad_request(f"{what}: wait_s must be a number >= 0, got {wait_s!r}")
        return store, bound, min(float(wait_s), 600.0)

    def run(self, watch: ProcessId | None) -> None:
        """Serve until stopped, or until ``watch`` (the Spark driver JVM) is gone."""
        from spark_statestore.connectors.spark.detached import wait_until_stopped

        wait_until_stopped(self.stopped, watch, "the store host")

    def close(self) -> None:
        """Stop serving (the metrics endpoint too), aborting open changelog transactions."""
        self.stopped.set()
        self.changelogs.close()
        if self.metrics is not None:
            self.metrics.close()
        with contextlib.suppress(Exception):
            self._service.shutdown()


def _until_end_marker(reader: Any) -> Iterator[pa.RecordBatch]:
    """The record batches of a task's ``DoPut`` stream, which ends with the task's end marker
    (``{"end": rows}`` as a metadata message): a stream that ends without it, or with another
    count, is a task that failed or was killed mid-write, and raises (nothing is staged)."""
    rows = 0
    end: Any = None
    for chunk in reader:
        if chunk.data is not None and chunk.data.num_rows:
            if end is not None:
                raise bad_request("stage: rows after the end marker")
            rows += chunk.data.num_rows
            yield chunk.data
        if chunk.app_metadata is not None:
            end = decode_request(chunk.app_metadata.to_pybytes(), "stage end marker").get("end")
    if end != rows:
        raise bad_request(
            f"stage: the task's stream ended after {rows} rows without its end marker "
            f"(got {end!r}): it failed mid-write; nothing is staged"
        )


@functools.cache
def _service_class() -> type:
    """The ``FlightServerBase`` subclass, defined on first use (pyarrow loads then)."""
    import pyarrow as pa
    import pyarrow.flight as flight

    from spark_statestore.errors import StateStoreError
    from spark_statestore.serve.auth import token_matches
    from spark_statestore.serve.errors import RemoteStoreError, ServeError
    from spark_statestore.serve.protocol import encode_error_info
    from spark_statestore.sink.staging import staged_schema
    from spark_statestore.store.scan import ScanSpec
    from spark_statestore.store.snapshot import arrow_schema

    def to_flight_error(server: StoreHostServer, exc: BaseException) -> Exception:
        if isinstance(exc, ServeError):
            error: ServeError = exc
        elif isinstance(exc, StateStoreError):
            error = RemoteStoreError(f"{type(exc).__name__}: {exc}", server.location)
        else:
            _log.error("store host %s: internal error", server.location, exc_info=exc)
            error = ServeError(
                f"internal error in the store host {server.location} ({type(exc).__name__}: "
                f"{exc}); see its log",
                server.location,
            )
        wire: Exception = flight.FlightServerError(
            str(error), extra_info=encode_error_info(error.kind, str(error))
        )
        return wire

    class _Authenticate(flight.ServerMiddlewareFactory):  # type: ignore[misc]
        def __init__(self, server: StoreHostServer) -> None:
            self._server = server

        def start_call(self, info: Any, headers: dict[str, Any]) -> None:
            if not token_matches(headers, self._server.token):
                raise flight.FlightUnauthenticatedError(
                    f"store host {self._server.location} refused the call: no valid "
                    "authorization token"
                )

    def with_position(position: Any) -> pa.Schema:
        return arrow_schema().with_metadata({POSITION_METADATA: position.to_json().encode()})

    class _HostService(flight.FlightServerBase):  # type: ignore[misc]
        def __init__(
            self,
            location: str,
            server: StoreHostServer,
            tls: tuple[bytes, bytes] | None,
            client_ca: bytes | None,
        ) -> None:
            super().__init__(
                location,
                tls_certificates=None if tls is None else [flight.CertKeyPair(*tls)],
                verify_client=client_ca is not None,
                root_certificates=client_ca,
                middleware={"auth": _Authenticate(server)},
            )
            self._server = server

        def do_put(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
            server = self._server
            freeze_long_lived()  # the first stage imports the changelog's modules
            try:
                with server.calls.call(STAGE):
                    request = decode_request(descriptor.command, "stage")
                    if not reader.schema.equals(staged_schema()):
                        raise bad_request(
                            f"stage: rows of schema {reader.schema} instead of the staged schema"
                        )
                    reply = server.stage(request, _until_end_marker(reader))
            except Exception as exc:
                raise to_flight_error(server, exc) from exc
            writer.write(pa.py_buffer(reply))

        def do_get(self, context: Any, ticket: Any) -> Any:
            server = self._server
            began = time.monotonic()
            stack = contextlib.ExitStack()
            try:
                request = decode_request(ticket.ticket, "scan")
                spec = ScanSpec.from_json(str(request.get("scan", "")))
                snapshot = stack.enter_context(server.snapshot(request, "scan"))
                schema = with_position(snapshot.position)
                batches = snapshot.batches(spec)
            except Exception as exc:
                stack.close()
                server.calls.record(SCAN, False, time.monotonic() - began)
                raise to_flight_error(server, exc) from exc

            def stream() -> Iterator[pa.RecordBatch]:
                sent = False  # a scan counts as answered once its last row was sent
                with stack:
                    try:
                        for batch in batches:
                            yield batch.replace_schema_metadata(schema.metadata)
                        sent = True
                    except Exception as exc:
                        raise to_flight_error(server, exc) from exc
                    finally:
                        server.calls.record(SCAN, sent, time.monotonic() - began)

            return flight.GeneratorStream(schema, stream())

        def do_exchange(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
            from spark_statestore.connectors.spark.host.publishing import PUBLISH_STAGED

            try:
                request = decode_request(descriptor.command, "exchange")
            except Exception as exc:
                raise to_flight_error(self._server, exc) from exc
            if request.get("kind") == PUBLISH_STAGED:
                try:
                    self._server.changelogs.publish_staged(request, reader, writer)
                except Exception as exc:
                    raise to_flight_error(self._server, exc) from exc
                return
            with self._server.calls.call(LOOKUP):
                self._lookup(descriptor, reader, writer)

        def do_action(self, context: Any, action: Any) -> Iterator[Any]:
            from spark_statestore.connectors.spark.host import publishing

            server = self._server
            name = action.type
            try:
                if name not in (
                    publishing.EXPECT,
                    publishing.PUBLISHED,
                    publishing.ABORT,
                    publishing.PARTITIONS,
                ):
                    raise bad_request(f"the store host has no action {name!r}")
                body = decode_request(action.body.to_pybytes(), name)
                reply = server.changelogs.action(name, body)
            except Exception as exc:
                raise to_flight_error(server, exc) from exc
            return iter([flight.Result(json.dumps(reply).encode())])

        def _lookup(self, descriptor: Any, reader: Any, writer: Any) -> None:
            server = self._server
            try:
                request = decode_request(descriptor.command, "lookup")
                arrays = [
                    chunk.data.column(0).cast(pa.binary())
                    for chunk in reader
                    if chunk.data is not None and chunk.data.num_rows
                ]
                keys = pa.concat_arrays(arrays) if arrays else pa.array([], pa.binary())
                table, position = server.lookup(request, keys)  # each key once, ascending
                schema = with_position(position)
            except Exception as exc:
                raise to_flight_error(server, exc) from exc
            writer.begin(schema)
            for batch in table.replace_schema_metadata(schema.metadata).to_batches():
                writer.write_batch(batch)

    return _HostService


def main() -> int:
    """The host process (see :func:`~spark_statestore.connectors.spark.detached.serve_detached`):
    its start request names the address, port, token and certificate; it answers
    ``{"ready": location, "port": n}``."""
    from spark_statestore.connectors.spark.detached import serve_detached

    def start(request: dict[str, Any]) -> StoreHostServer:
        tls, client_ca = request.get("tls"), request.get("tls_client_ca")
        metrics_port = request.get("metrics_port")
        return StoreHostServer(
            request["host"],
            int(request["port"]),
            request["token"],
            None if tls is None else (tls[0].encode("ascii"), tls[1].encode("ascii")),
            None if client_ca is None else client_ca.encode("ascii"),
            metrics_port=None if metrics_port is None else int(metrics_port),
            commit_token=request.get("commit_token"),
        )

    def ready(server: Any) -> dict[str, Any]:
        return {"ready": server.location, "port": server.port, "metrics": server.metrics_url}

    return serve_detached("store host", start, ready)
