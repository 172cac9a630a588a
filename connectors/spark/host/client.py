"""A task's client of the store host (:mod:`.server`): stage a sink task's rows, scan a
store, look keys up, wherever the task runs."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.spark.host.record import HostRef
from spark_statestore.position import Position, PositionBound

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.sink.staging import StagedFile
    from spark_statestore.store.scan import ScanSpec

__all__ = ["StoreHostClient", "shared_client"]

LOOKUP_TIMEOUT_S = 120.0


class StoreHostClient:
    """Calls to one store host (a Flight client; close it, or use it as a context manager).

    Parameters
    ----------
    ref
        The host's location, token and certificate, as the plan carries them.
    """

    def __init__(self, ref: HostRef) -> None:
        import pyarrow.flight as flight

        from spark_statestore.serve.auth import AUTH_HEADER, bearer

        self.ref = ref
        self._client = flight.FlightClient(
            ref.location,
            tls_root_certs=ref.tls_root_certs,
            cert_chain=ref.tls_client_cert,
            private_key=ref.tls_client_key,
        )
        self._headers = [(AUTH_HEADER.encode(), bearer(ref.token))]

    def _options(self, timeout_s: float | None) -> Any:
        import pyarrow.flight as flight

        return flight.FlightCallOptions(timeout=timeout_s, headers=self._headers)

    def _error(self, exc: BaseException) -> Exception:
        from spark_statestore.serve.client import translate_flight_error

        # A shared connection that failed is not reused: the next call dials the host anew
        # (gRPC's own reconnection of a failed channel waits a backoff of up to minutes).
        with _SHARED_LOCK:
            if _SHARED.get(self.ref) is self:
                del _SHARED[self.ref]

        return translate_flight_error(
            exc,
            self.ref.location,
            tls_root_certs=self.ref.tls_root_certs,
            client_cert=self.ref.tls_client_cert is not None,
        )

    def stage(
        self,
        store: str,
        query_id: str,
        batch_id: int,
        partition_id: int,
        attempt: int,
        batches: Iterable[pa.RecordBatch],
    ) -> StagedFile:
        """Stage ``batches`` (the staged schema) as this task attempt's file of the batch, in
        the staging area of ``store`` on the host; the file the commit message names.

        Raises
        ------
        ServeError
            If the host is unreachable or fails to write the file (nothing is staged then).
        """
        import pyarrow as pa
        import pyarrow.flight as flight

        from spark_statestore.sink.staging import StagedFile, staged_schema

        command = {
            "store": store,
            "query_id": query_id,
            "batch_id": batch_id,
            "partition_id": partition_id,
            "attempt": attempt,
        }
        descriptor = flight.FlightDescriptor.for_command(json.dumps(command).encode())
        try:
            writer, replies = self._client.do_put(descriptor, staged_schema(), self._options(None))
            try:
                rows = 0
                for batch in batches:
                    if batch.num_rows:
                        writer.write_batch(batch)
                        rows += batch.num_rows
                # Only a stream with this marker is staged: one cut short (the task failed or
                # was killed) is not, whatever the transport says about how it ended.
                writer.write_metadata(pa.py_buffer(json.dumps({"end": rows}).encode()))
                writer.done_writing()
                reply = replies.read()
            except BaseException:
                with contextlib.suppress(pa.ArrowException):
                    writer.close()  # the host refuses the unfinished stream: nothing staged
                raise
            writer.close()
        except pa.ArrowException as exc:
            raise self._error(exc) from exc
        if reply is None:
            from spark_statestore.serve.errors import ServeError

            raise ServeError(f"the store host {self.ref.location} did not say what it staged")
        return StagedFile.from_json(json.loads(reply.to_pybytes()))

    @contextlib.contextmanager
    def scan(
        self, store: str, spec: ScanSpec, bound: PositionBound, wait_s: float = 0.0
    ) -> Iterator[tuple[Position, Iterator[pa.RecordBatch]]]:
        """``(position, batches)`` of ``store`` as it is now on the host (through its owner
        or a private checkpoint, after waiting up to ``wait_s`` for ``bound``): check the
        position against the bound before using the rows."""
        import pyarrow as pa
        import pyarrow.flight as flight

        ticket = {
            "store": store,
            "scan": spec.to_json(),
            "bound": bound.to_dict(),
            "wait_s": wait_s,
        }
        try:
            reader = self._client.do_get(
                flight.Ticket(json.dumps(ticket).encode()), self._options(None)
            )
            position = _position(reader.schema)
        except pa.ArrowException as exc:
            raise self._error(exc) from exc

        def batches() -> Iterator[pa.RecordBatch]:
            while True:
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    return
                except pa.ArrowException as exc:
                    raise self._error(exc) from exc
                if chunk.data is not None:
                    yield chunk.data

        try:
            yield position, batches()
        finally:
            reader.cancel()

    def lookup(
        self,
        store: str,
        keys: list[bytes] | pa.Array,
        bound: PositionBound,
        wait_s: float = 0.0,
        framed_ids: frozenset[int] | None = None,
    ) -> tuple[pa.Table, Position]:
        """The rows of ``keys`` (bytes, or an Arrow binary array) present in one snapshot of
        ``store`` on the host, and its position (check it against ``bound``); with
        ``framed_ids``, after checking that snapshot holds no key framed with another schema
        id (:attr:`~spark_statestore.store.scan.ScanSpec.framed_ids`)."""
        import pyarrow as pa
        import pyarrow.flight as flight

        command: dict[str, Any] = {"store": store, "bound": bound.to_dict(), "wait_s": wait_s}
        if framed_ids is not None:
            command["framed_ids"] = sorted(framed_ids)
        descriptor = flight.FlightDescriptor.for_command(json.dumps(command).encode())
        schema = pa.schema([pa.field("key", pa.binary(), nullable=False)])
        try:
            writer, reader = self._client.do_exchange(
                descriptor, self._options(LOOKUP_TIMEOUT_S + wait_s)
            )
            writer.begin(schema)
            column = (
                keys.cast(pa.binary())
                if isinstance(keys, pa.Array)
                else pa.array(keys, pa.binary())
            )
            writer.write_batch(pa.record_batch([column], schema=schema))
            writer.done_writing()
            table = reader.read_all()
            writer.close()
        except pa.ArrowException as exc:
            raise self._error(exc) from exc
        return table, _position(table.schema)

    def exchange(self, descriptor: Any, timeout_s: float | None) -> tuple[Any, Any]:
        """A ``DoExchange`` call with this client's headers: ``(writer, reader)``."""
        return self._client.do_exchange(descriptor, self._options(timeout_s))  # type: ignore[no-any-return]

    def action(self, name: str, body: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
        """A Flight action with a JSON body; its JSON reply.

        Raises
        ------
        ServeError
            If the host is unreachable or refuses the call.
        """
        import pyarrow as pa
        import pyarrow.flight as flight

        try:
            results = list(
                self._client.do_action(
                    flight.Action(name, json.dumps(body).encode()), self._options(timeout_s)
                )
            )
        except pa.ArrowException as exc:
            raise self._error(exc) from exc
        if not results:
            return {}
        reply = json.loads(results[-1].body.to_pybytes())
        return reply if isinstance(reply, dict) else {"reply": reply}

    def error(self, exc: BaseException) -> Exception:
        """The store's error for a failed call of this client."""
        return self._error(exc)

    def close(self) -> None:
        """Close the connection."""
        self._client.close()

    def __enter__(self) -> StoreHostClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _position(schema: pa.Schema) -> Position:
    """The snapshot position the host put in a reply's schema metadata."""
    from spark_statestore.connectors.spark.host.requests import POSITION_METADATA
    from spark_statestore.serve.errors import ServeError

    raw = (schema.metadata or {}).get(POSITION_METADATA)
    if raw is None:
        raise ServeError("the store host's reply says no snapshot position")
    return Position.from_json(raw.decode("utf-8"))


_SHARED: dict[HostRef, StoreHostClient] = {}
_SHARED_LOCK = threading.Lock()


def shared_client(ref: HostRef) -> StoreHostClient:
    """This process's client of the host ``ref`` names, made on first use and kept (calls
    from several threads are fine: Flight's client is thread-safe). For a process that calls
    the same host again and again (a sink's commit process once per micro-batch, a reused
    Python worker once per task): a new connection per call costs more than the call (a TLS
    handshake to a host on another machine). A call that fails drops it. Do not close it."""
    with _SHARED_LOCK:
        client = _SHARED.get(ref)
        if client is None:
            client = _SHARED[ref] = StoreHostClient(ref)
        return client
