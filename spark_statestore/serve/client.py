"""The client of a :class:`~spark_statestore.serve.server.StoreServer`.

This is the adapter between Arrow Flight and the project's errors: every Flight failure is
classified here, once. Failures the server reports arrive with their kind (see
:mod:`~spark_statestore.serve.protocol`) and are raised as the same
:class:`~spark_statestore.serve.errors.ServeError` subclass the server raised; transport
failures become :class:`~spark_statestore.serve.errors.ServerUnavailableError`.

Why one module of over 500 lines: it is the one place where Flight failures are
classified; every call shares its authentication, pinning and error mapping.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from spark_statestore.position import Position, PositionBound
from spark_statestore.serve.auth import (
    AUTH_HEADER,
    CLIENT_HEADER,
    CREDENTIALS_FILE,
    ServeCredentials,
    bearer,
    check_token,
    read_credentials,
)
from spark_statestore.serve.errors import (
    AuthenticationError,
    BadRequestError,
    ReplyTooLargeError,
    ServeError,
    ServerConfigError,
    ServerUnavailableError,
    TlsHandshakeError,
    UnknownActionError,
    WrongStoreError,
    error_class_for,
)
from spark_statestore.serve.key_wire import decode_key_reply, encode_key_query, travels_compact
from spark_statestore.serve.protocol import (
    ACTION_DESCRIBE,
    ACTION_PIN,
    ACTION_QUERY,
    ACTION_QUERY_KEY,
    ACTION_RELEASE,
    ACTION_STATS,
    MAX_PIN_WAIT_S,
    DescribeReply,
    ScanTicket,
    StoreDescription,
    decode_error_info,
    decode_object,
    encode_object,
)
from spark_statestore.serve.query_wire import decode_result, encode_query_body
from spark_statestore.store.ownership import live_owner
from spark_statestore.store.scan import ScanSpec

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.query import LagInfo, StateQueryRequest, StateQueryResult
    from spark_statestore.serve.lookup_wire import LookupReply

__all__ = [
    "DEFAULT_IDLE_TIMEOUT_S",
    "MAX_REPLY_BYTES",
    "PinnedSnapshotInfo",
    "StoreClient",
    "client_for_store",
    "connect",
    "connect_to_owner",
    "translate_flight_error",
]

_log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1  # gRPC's limits are C ints

MAX_REPLY_BYTES = 256 * 1024 * 1024
"""The largest message a client accepts by default: one action reply or one streamed record
batch (a server's ``batch_rows`` rows)."""

DEFAULT_IDLE_TIMEOUT_S = 120.0
"""How long a scan waits by default for the server's next batch before failing."""


@dataclass(frozen=True, slots=True)
class PinnedSnapshotInfo:
    """A snapshot pinned on a store server: pass ``snapshot_id`` to
    :meth:`StoreClient.scan` to read it, and release it when done.

    Parameters
    ----------
    snapshot_id
        The pin's id on the server.
    position
        The position of the pinned commit.
    changelog_offsets
        ``{partition: next changelog offset}`` of the pinned commit.
    commit_seq
        The pinned commit's sequence number.
    metadata
        The server's whole description of the commit (store, topic, role, commit record...).
    """

    snapshot_id: str
    position: Position
    changelog_offsets: Mapping[int, int]
    commit_seq: int
    metadata: StoreDescription

    @classmethod
    def from_reply(cls, reply: Mapping[str, Any]) -> PinnedSnapshotInfo:
        """Decode the reply of the ``pin`` action.

        Raises
        ------
        BadRequestError
            If the reply is malformed.
        """
        snapshot_id = reply.get("snapshot_id")
        if not isinstance(snapshot_id, str):
            raise BadRequestError(f"malformed pin reply: snapshot_id {snapshot_id!r} is not a str")
        if "metadata" not in reply:
            raise BadRequestError('malformed pin reply: no "metadata" (the pinned commit)')
        description = StoreDescription.from_dict(reply["metadata"])
        return cls(
            snapshot_id=snapshot_id,
            position=description.position,
            changelog_offsets=description.changelog_offsets,
            commit_seq=description.commit_seq,
            metadata=description,
        )


class StoreClient:
    """Reads a store through the Flight server of its owner.

    Parameters
    ----------
    location
        The server's Flight location, e.g. ``grpc+tcp://127.0.0.1:40123``.
    timeout_s
        Deadline of each action (pin, release, describe, stats).
    scan_timeout_s
        Deadline of a whole scan stream; None (default) lets large scans run as long as they
        take.
    idle_timeout_s
        The longest a scan waits for the server's next batch (time the caller spends on a
        batch does not count): a wedged server fails the scan with
        :class:`~spark_statestore.serve.errors.ServerUnavailableError` instead of hanging.
        None: no limit.
    token
        The server's bearer token (see :mod:`~spark_statestore.serve.auth`); a server
        refuses every call without it.
    tls_root_certs
        PEM certificates to trust for a ``grpc+tls`` location (None: the system's roots).
    tls_client_cert, tls_client_key
        A PEM client certificate chain and its private key, for a server in mutual-TLS mode
        (:mod:`~spark_statestore.serve.mutual_tls`): it refuses a client without a
        certificate signed by a CA it accepts in the TLS handshake
        (:class:`~spark_statestore.serve.errors.TlsHandshakeError`).
    store_id
        The id of the store the caller means: a pin or describe answered by a server of
        another store raises :class:`~spark_statestore.serve.errors.WrongStoreError`.
    max_reply_bytes
        The largest message accepted: one action reply or one streamed record batch. gRPC
        refuses a larger one before buffering it whole, and the call raises
        :class:`~spark_statestore.serve.errors.ReplyTooLargeError`.

    Raises
    ------
    ServerConfigError
        If ``location`` is not a string, a timeout is not a positive number,
        ``max_reply_bytes`` is not an int >= 1, or one of ``tls_client_cert`` and
        ``tls_client_key`` comes without the other or they are not a PEM certificate and its
        key.
    """

    def __init__(
        self,
        location: str,
        *,
        timeout_s: float = 30.0,
        scan_timeout_s: float | None = None,
        idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
        token: str | None = None,
        tls_root_certs: bytes | None = None,
        store_id: str | None = None,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        tls_client_cert: bytes | None = None,
        tls_client_key: bytes | None = None,
    ) -> None:
        if not isinstance(location, str) or "://" not in location:
            raise ServerConfigError(
                f"a store server location looks like grpc+tcp://host:port, got {location!r}"
            )
        for name, value in (
            ("timeout_s", timeout_s),
            ("scan_timeout_s", scan_timeout_s),
            ("idle_timeout_s", idle_timeout_s),
        ):
            if value is None and name != "timeout_s":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ServerConfigError(f"{name} must be a number of seconds > 0, got {value!r}")
        if (
            isinstance(max_reply_bytes, bool)
            or not isinstance(max_reply_bytes, int)
            or not 1 <= max_reply_bytes <= _INT32_MAX
        ):
            raise ServerConfigError(
                f"max_reply_bytes must be an int in [1, 2**31-1], got {max_reply_bytes!r}"
            )
        self.max_reply_bytes = max_reply_bytes
        self.location = location
        self.timeout_s = timeout_s
        self.scan_timeout_s = scan_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.store_id = store_id
        self._headers = [(CLIENT_HEADER.encode(), uuid.uuid4().hex.encode())]
        if token is not None:
            self._headers.append((AUTH_HEADER.encode(), bearer(check_token(token))))
        self._tls_root_certs = tls_root_certs
        self._tls_client: tuple[bytes, bytes] | None = None
        if tls_client_cert is not None or tls_client_key is not None:
            from spark_statestore.serve.mutual_tls import check_client_identity

            if tls_client_cert is None or tls_client_key is None:
                raise ServerConfigError(
                    "tls_client_cert and tls_client_key go together: a client certificate "
                    "chain and its private key (mutual TLS)",
                    location,
                )
            self._tls_client = check_client_identity(
                tls_client_cert, tls_client_key, names="tls_client_cert and tls_client_key"
            )
        self._lock = threading.Lock()
        self._client: Any = None
        self._closed = False
        # False once the server answered that it has no query_key action (an older
        # version): single-key queries then travel as JSON too.
        self._compact_keys = True
        # Whether the server's query_key replies say the bound rule (flag 16): None until
        # it answered one, False once it refused the flag (an older version).
        self._compact_rule: bool | None = None

    @classmethod
    def from_credentials(
        cls, location: str, credentials: ServeCredentials, **kwargs: Any
    ) -> StoreClient:
        """A client of the server at ``location`` with ``credentials`` (token, store id,
        TLS roots, client certificate); ``kwargs``: the client's other settings."""
        return cls(
            location,
            token=credentials.token,
            tls_root_certs=credentials.tls_root_certs,
            store_id=credentials.store_id,
            tls_client_cert=credentials.tls_client_cert,
            tls_client_key=credentials.tls_client_key,
            **kwargs,
        )

    # -- actions --------------------------------------------------------------------------
    def pin(self, bound: PositionBound | None = None, *, wait_s: float = 0.0) -> PinnedSnapshotInfo:
        """Pin a snapshot of the store's latest commit on the server.

        With a ``bound`` and ``wait_s`` > 0 the server first waits, up to ``wait_s`` (at
        most 600 s), for a commit whose position reaches the bound, then pins the latest
        commit either way: check the returned position (``bound.permits``).

        Raises
        ------
        TooManyPinsError
            If the server holds its maximum number of pins.
        ServerUnavailableError
            If no server answers at :attr:`location`.
        """
        body: dict[str, Any] = {}
        timeout_s = self.timeout_s
        if bound is not None and bound.position is not None and wait_s > 0:
            body = {
                "position_bound": bound.to_dict(),
                "wait_ms": int(wait_s * 1000),
            }
            timeout_s += min(wait_s, MAX_PIN_WAIT_S)
        reply = self._action(ACTION_PIN, body, timeout_s=timeout_s)
        try:
            pinned = PinnedSnapshotInfo.from_reply(reply)
        except BadRequestError as exc:
            raise ServeError(
                f"store server {self.location} sent an unexpected pin reply: {exc}", self.location
            ) from exc
        try:
            self._check_store(pinned.metadata)
        except WrongStoreError:
            self.release(pinned.snapshot_id)
            raise
        return pinned

    def release(self, snapshot_id: str) -> bool:
        """Release a pinned snapshot (idempotent); False when it was no longer pinned."""
        reply = self._action(ACTION_RELEASE, {"snapshot_id": snapshot_id})
        return bool(reply.get("released"))

    def describe(self) -> DescribeReply:
        """The store's latest commit (name, topic, position, offsets...), its lags, its
        owner and the number of live pins.

        Raises
        ------
        ServeError
            If the server's reply is malformed.
        WrongStoreError
            If the server serves another store than :attr:`store_id`.
        """
        raw = self._action(ACTION_DESCRIBE, {})
        try:
            reply = DescribeReply.from_dict(raw)
        except BadRequestError as exc:
            raise ServeError(
                f"store server {self.location} sent a malformed describe reply: {exc}",
                self.location,
            ) from exc
        self._check_store(reply.description)
        return reply

    def _check_store(self, description: StoreDescription) -> None:
        served = description.store_id
        if self.store_id is not None and served != self.store_id:
            raise WrongStoreError(
                f"store server {self.location} serves store {served!r} at "
                f"{description.path!r}, not store {self.store_id!r}: the owner file "
                "that pointed here is stale or was edited; re-run the query (it finds the "
                "store's real owner), and check who can write the store directory",
                self.location,
            )

    def lags(self) -> dict[int, LagInfo] | None:
        """``{partition: LagInfo}`` from :meth:`describe`; None when the server knows none."""
        lags = self.describe().lags
        return None if lags is None else dict(lags)

    @property
    def position(self) -> Position:
        """The position of the store's latest commit (one ``describe`` call)."""
        return self.describe().description.position

    def query(self, request: StateQueryRequest, *, wait_s: float = 0.0) -> StateQueryResult[Any]:
        """Run an IQv2 request on the served store, with the semantics of the local
        :meth:`Store.query <spark_statestore.store.Store.query>`: the same per-partition
        results, positions, failure reasons and messages (failures are results, not
        exceptions).

        Parameters
        ----------
        request
            The request; every built-in query type travels. A key that is not bytes, and a
            :class:`~spark_statestore.query.CustomQuery`, travel as their type name and
            ``repr``: the store answers them with ``STORE_EXCEPTION`` and
            ``UNKNOWN_QUERY_TYPE`` as a local store does.
        wait_s
            With a position bound, the server first waits up to ``wait_s`` (at most 600 s)
            for a commit that satisfies the bound on every partition asked, then answers
            either way (``NOT_UP_TO_BOUND`` on partitions still behind). 0: answer at once.

        Every successful answer's position is checked here against the request's bound, by
        the rule the server says its store applied (the whole bound for a store-wide
        position, else the bound's entries for the answer's partition; a server of an older
        version says none, and its answers are checked by the latter): a success that has not
        reached the bound is returned as ``NOT_UP_TO_BOUND`` (and logged, as a warning), never
        as a success, whatever the server answered.

        Raises
        ------
        QueryError
            If ``request`` is not a :class:`~spark_statestore.query.StateQueryRequest` or
            ``wait_s`` is not a number >= 0.
        WrongStoreError
            If the server serves another store than :attr:`store_id`.
        RemoteStoreError
            If the store failed on the server (e.g. it was closed): where a local store
            raises, the remote one raises this.
        ServerUnavailableError
            If no server answers at :attr:`location`.
        """
        from spark_statestore.query import QueryError

        if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not wait_s >= 0:
            raise QueryError(f"wait_s must be a number of seconds >= 0, got {wait_s!r}")
        wait_s = min(float(wait_s), MAX_PIN_WAIT_S)
        timeout_s = self.timeout_s + wait_s
        if self._compact_keys and travels_compact(request):
            compact = self._query_compact(request, int(wait_s * 1000), timeout_s)
            if compact is not None:
                store_id, answer, store_wide = compact
                self._check_served(store_id)
                return self._checked(request, answer, store_id, store_wide)
        reply = self._action(
            ACTION_QUERY, encode_query_body(request, int(wait_s * 1000)), timeout_s=timeout_s
        )
        try:
            served, raw = reply.get("store_id"), reply.get("result")
            wide = reply.get("store_wide")
            if not isinstance(served, str) or not isinstance(raw, dict):
                raise BadRequestError('expected {"store_id": str, "result": {...}}')
            if wide is not None and not isinstance(wide, bool):
                raise BadRequestError(f"store_wide must be true or false, got {wide!r}")
            result = decode_result(raw)
        except BadRequestError as exc:
            raise self._malformed_query_reply(exc) from exc
        self._check_served(served)
        return self._checked(request, result, served, wide)

    def _query_compact(
        self, request: StateQueryRequest, wait_ms: int, timeout_s: float
    ) -> tuple[str, StateQueryResult[Any], bool | None] | None:
        """``(store id, result, store_wide)`` of a ``query_key`` call, or None when the
        server has no such action (an older version: ask with JSON)."""
        with_rule = self._compact_rule is not False
        body = encode_key_query(request, wait_ms, with_rule=with_rule)
        try:
            raw_reply = self._call_bytes(ACTION_QUERY_KEY, body, timeout_s)
        except UnknownActionError:
            self._compact_keys = False
            return None
        except BadRequestError:
            if not with_rule or self._compact_rule is not None:
                raise
            # A server older than the bound rule flag refuses it as unknown: ask again
            # without it. A request refused for another reason is refused again, and raised.
            body = encode_key_query(request, wait_ms, with_rule=False)
            raw_reply = self._call_bytes(ACTION_QUERY_KEY, body, timeout_s)
            self._compact_rule = False
        else:
            self._compact_rule = with_rule
        try:
            return decode_key_reply(raw_reply)
        except BadRequestError as exc:
            raise self._malformed_query_reply(exc) from exc

    def _checked(
        self,
        request: StateQueryRequest,
        result: StateQueryResult[Any],
        served: str,
        store_wide: bool | None,
    ) -> StateQueryResult[Any]:
        """``result`` with every success refused whose position has not reached the
        request's bound, by the rule the server said (None: the per-partition rule)."""
        return result.checked_against(
            request.position_bound,
            store_wide=bool(store_wide),
            answered_by=f"store server {self.location} (store {served})",
        )

    def _malformed_query_reply(self, exc: BadRequestError) -> ServeError:
        return ServeError(
            f"store server {self.location} sent a malformed query reply: {exc}", self.location
        )

    def _check_served(self, served: str) -> None:
        """Refuse a query answered by a server of another store than :attr:`store_id`."""
        if self.store_id is not None and served != self.store_id:
            raise WrongStoreError(
                f"store server {self.location} serves store {served!r}, not store "
                f"{self.store_id!r}: the owner file that pointed here is stale or was edited; "
                "connect again (it finds the store's real owner)",
                self.location,
            )

    def stats(self) -> dict[str, int]:
        """The server's cumulative scan counters (``rows_examined``, ``rows_returned``,
        ``requests``) and the number of pins ``waiting`` for their position bound."""
        return {key: int(value) for key, value in self._action(ACTION_STATS, {}).items()}

    # -- scans ----------------------------------------------------------------------------
    def scan(
        self, spec: ScanSpec, snapshot_id: str | None = None
    ) -> Generator[pa.RecordBatch, None, None]:
        """Stream the rows ``spec`` selects as Arrow record batches (schema
        :func:`~spark_statestore.store.snapshot.arrow_schema`). Closing the generator
        before its end cancels the stream on the server.

        Parameters
        ----------
        spec
            What to read.
        snapshot_id
            A pinned snapshot's id (see :meth:`pin`); None reads the latest commit.

        Raises
        ------
        SnapshotExpiredError
            (while iterating) If the pinned snapshot was released or expired.
        ServerUnavailableError
            (while iterating) If no server answers at :attr:`location`.
        """
        ticket = ScanTicket.for_scan(spec, snapshot_id).to_bytes()
        return self._stream(ticket)

    def lookup(
        self,
        keys: pa.Array | list[bytes],
        bound: PositionBound | None = None,
        *,
        wait_s: float = 0.0,
    ) -> tuple[pa.Table, LookupReply]:
        """The rows of ``keys`` that exist, read in one snapshot of the latest commit, in one
        call (:mod:`~spark_statestore.serve.lookup_wire`): the rows of
        ``read_table(ScanSpec.for_keys(keys))``, keys ascending, each key once, with no JSON
        or base64 per key.

        With a ``bound`` and ``wait_s`` > 0 the server first waits, up to ``wait_s`` (at most
        600 s), for a commit whose position reaches the bound, then reads the latest commit
        either way: check the reply's position (``bound.permits(reply.position)``).

        Parameters
        ----------
        keys
            Keys as bytes, or an Arrow binary array without nulls.

        Returns
        -------
        (pyarrow.Table, LookupReply)
            The rows (schema :func:`~spark_statestore.store.snapshot.arrow_schema`) and the
            snapshot they were read in (position, store id, commit).

        Raises
        ------
        BadRequestError
            If a key is not bytes (or null), or the keys exceed the server's request limit.
        WrongStoreError
            If the server serves another store than :attr:`store_id`.
        ServerUnavailableError
            If no server answers at :attr:`location`.
        """
        import pyarrow as pa
        import pyarrow.flight as flight

        from spark_statestore.serve.lookup_wire import LookupReply, LookupRequest

        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        if isinstance(keys, pa.Array):
            if not (pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type)):
                raise BadRequestError(f"lookup keys must be a binary array, got {keys.type}")
            column = keys
        else:
            if isinstance(keys, (bytes, bytearray, memoryview, str)):
                raise BadRequestError(
                    f"lookup keys are a collection of bytes keys, got the single value "
                    f"{keys!r}; wrap it: lookup([key])"
                )
            items = list(keys)
            if not set(map(type, items)) <= {bytes}:  # the common case, checked in C
                bad = next(key for key in items if not isinstance(key, bytes))
                hint = " (encode it, e.g. key.encode())" if isinstance(bad, str) else ""
                raise BadRequestError(f"lookup keys must be bytes, got {bad!r}{hint}")
            column = pa.array(items, pa.binary())
        if column.null_count:
            raise BadRequestError(f"lookup keys hold {column.null_count} null(s); a key is bytes")
        waits = bound is not None and bound.position is not None and wait_s > 0
        request = LookupRequest(bound if waits else None, int(wait_s * 1000) if waits else 0)
        timeout_s = self.timeout_s + (request.wait_s if waits else 0.0)
        descriptor = flight.FlightDescriptor.for_command(request.to_bytes())
        options = flight.FlightCallOptions(timeout=timeout_s, headers=self._headers)
        schema = pa.schema([pa.field("key", column.type, nullable=False)])
        try:
            writer, reader = self._flight().do_exchange(descriptor, options)
            try:
                writer.begin(schema)
                if len(column):
                    writer.write_batch(pa.record_batch([column], schema=schema))
                writer.done_writing()
                table = reader.read_all()
            except BaseException:
                with contextlib.suppress(pa.ArrowException):
                    writer.close()  # it would raise the server's error again
                raise
            writer.close()
        except pa.ArrowException as exc:
            raise self._translate(exc) from exc
        reply = LookupReply.from_metadata(table.schema.metadata, self.location)
        self._check_served(reply.store_id)
        return table, reply

    def read_table(self, spec: ScanSpec, snapshot_id: str | None = None) -> pa.Table:
        """:meth:`scan` collected into one Arrow table."""
        import pyarrow as pa

        from spark_statestore.store.snapshot import arrow_schema

        return pa.Table.from_batches(list(self.scan(spec, snapshot_id)), schema=arrow_schema())

    def _stream(self, ticket: bytes) -> Generator[pa.RecordBatch, None, None]:
        import pyarrow as pa
        import pyarrow.flight as flight

        client = self._flight()
        options = flight.FlightCallOptions(timeout=self.scan_timeout_s, headers=self._headers)
        reader = None
        finished = False
        watch = None
        try:
            reader = client.do_get(flight.Ticket(ticket), options)
            if self.idle_timeout_s is not None:
                watch = IdleWatch(reader.cancel, self.idle_timeout_s)
            while True:
                if watch is not None:
                    watch.arm()
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    break
                finally:
                    if watch is not None:
                        watch.disarm()
                yield chunk.data
            finished = True
        except pa.ArrowException as exc:
            finished = True
            if watch is not None and watch.fired:
                raise ServerUnavailableError(
                    f"store server {self.location} sent nothing for {self.idle_timeout_s:g} s "
                    "in the middle of a scan: its owner may be wedged or overloaded. Retry; if "
                    "it persists, check the owning process (its pid is in the store's "
                    "_owner.json)",
                    self.location,
                ) from exc
            raise self._translate(exc) from exc
        finally:
            if watch is not None:
                watch.close()
            if reader is not None and not finished:
                # The caller stopped early: let the server end the stream now.
                reader.cancel()

    def call(
        self, name: str, body: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """Call an action the server was given beyond the built-in ones
        (``StoreServer(actions=...)``): ``body`` is sent as JSON, the reply is decoded.

        Raises
        ------
        ServeError
            (A subclass:) the server refused the call or failed, or is unreachable.
        """
        return self._action(name, body, timeout_s=timeout_s)

    # -- plumbing -------------------------------------------------------------------------
    def _action(
        self, name: str, body: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """Call action ``name`` with a JSON object and decode its JSON object reply."""
        reply = self._call_bytes(name, encode_object(body), timeout_s)
        try:
            return decode_object(reply, f"reply to action {name!r}")
        except BadRequestError as exc:
            raise ServeError(
                f"store server {self.location} sent a malformed reply: {exc}", self.location
            ) from exc

    def _call_bytes(self, name: str, body: bytes, timeout_s: float | None = None) -> bytes:
        """Call action ``name`` with ``body`` and return its one reply's bytes."""
        import pyarrow as pa
        import pyarrow.flight as flight

        client = self._flight()
        options = flight.FlightCallOptions(
            timeout=timeout_s or self.timeout_s, headers=self._headers
        )
        try:
            results = list(client.do_action(flight.Action(name, body), options))
        except pa.ArrowException as exc:
            raise self._translate(exc) from exc
        if len(results) != 1:
            raise ServeError(
                f"store server {self.location} answered action {name!r} with {len(results)} "
                "results instead of one; is it a spark-statestore server of this version?",
                self.location,
            )
        reply: bytes = results[0].body.to_pybytes()
        return reply

    def _flight(self) -> Any:
        with self._lock:
            if self._closed:
                raise ServeError(
                    f"the client of store server {self.location} is closed; create a new "
                    "StoreClient",
                    self.location,
                )
            if self._client is None:
                import pyarrow as pa
                import pyarrow.flight as flight

                cert, key = self._tls_client or (None, None)
                try:
                    self._client = flight.FlightClient(
                        self.location,
                        tls_root_certs=self._tls_root_certs,
                        generic_options=[("grpc.max_receive_message_length", self.max_reply_bytes)],
                        cert_chain=cert,
                        private_key=key,
                    )
                except pa.ArrowException as exc:
                    raise ServerConfigError(
                        f"cannot connect to store server location {self.location!r}: {exc}; "
                        "expected grpc+tcp://host:port",
                        self.location,
                    ) from exc
            return self._client

    def _translate(self, exc: BaseException) -> ServeError:
        import pyarrow.flight as flight

        if isinstance(exc, flight.FlightCancelledError):
            # This client cancels only streams its caller stopped (or the idle watch, told
            # apart before): gRPC cancels a call whose message outgrew the receive limit.
            return ReplyTooLargeError(
                f"store server {self.location} sent a message larger than this client "
                f"accepts (max_reply_bytes={self.max_reply_bytes:,}): read large answers in "
                "pages (spark_statestore.discovery.RoutedScan, or pin and scan with a "
                "limit), narrow the query, or raise max_reply_bytes",
                self.location,
            )
        return translate_flight_error(
            exc,
            self.location,
            tls_root_certs=self._tls_root_certs,
            client_cert=self._tls_client is not None,
        )

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            client, self._client = self._client, None
            self._closed = True
        if client is not None:
            client.close()

    def __enter__(self) -> StoreClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StoreClient({self.location!r})"


def translate_flight_error(
    exc: BaseException,
    location: str,
    *,
    tls_root_certs: bytes | None = None,
    client_cert: bool = False,
) -> ServeError:
    """Classify the failure of a Flight call to the server at ``location`` (the one place
    that does): the server's own error kind when it sent one, else by gRPC status.

    gRPC reports a refused TLS handshake as an unavailable server: for a ``grpc+tls``
    location the handshake is then tried once more by itself, with the client's roots
    ``tls_root_certs``, to tell a refusal (:class:`TlsHandshakeError`, saying whether a
    client certificate is missing or refused, ``client_cert``: whether one was presented,
    or the server's is not trusted) from a server that is down."""
    import pyarrow.flight as flight

    decoded = decode_error_info(getattr(exc, "extra_info", None))
    if decoded is not None:
        kind, message = decoded
        return error_class_for(kind)(message, location)
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, flight.FlightUnauthenticatedError):
        return AuthenticationError(
            f"store server {location} refused this client's credentials ({detail}): "
            "pass the server's token (its owner writes it, readable by the store's owner "
            "user only, to <store>/_serve.json; connect_to_owner() reads it)",
            location,
        )
    if isinstance(exc, flight.FlightUnavailableError):
        from spark_statestore.serve.mutual_tls import handshake_refusal

        refusal = handshake_refusal(location, tls_root_certs, presented=client_cert)
        if refusal is not None:
            return TlsHandshakeError(
                f"the TLS handshake with store server {location} failed: {refusal} ({detail})",
                location,
            )
        return ServerUnavailableError(
            f"no store server at {location}: the query or process that owns the "
            "store may have stopped; re-run the query (it reads the store directly when "
            f"no process owns it) ({detail})",
            location,
        )
    if isinstance(exc, flight.FlightTimedOutError):
        return ServerUnavailableError(
            f"store server {location} did not answer in time ({detail}); it may be "
            "overloaded or stuck: retry, or raise the client's timeout",
            location,
        )
    if isinstance(exc, flight.FlightCancelledError):
        return ServeError(f"call to store server {location} was cancelled ({detail})", location)
    return ServeError(f"store server {location} failed: {detail}", location)


def connect_to_owner(
    path: str | os.PathLike[str], *, timeout_s: float = 30.0
) -> StoreClient | None:
    """A client of the server of the live owner of store ``path``, or None when no live
    process owns the store or its owner serves no Flight endpoint (then the caller may open
    the store itself).

    Raises
    ------
    AuthenticationError
        If an owner serves the store but its credentials file cannot be read (another
        user's store, or a server of an older version).
    """
    store_path = os.path.abspath(os.fspath(path))
    owner = live_owner(store_path)
    if owner is None or not owner.flight_location:
        return None
    _log.debug("store %s: reading through its owner %s", path, owner.describe())
    return client_for_store(store_path, owner.flight_location, timeout_s=timeout_s)


def connect(
    target: str | os.PathLike[str],
    *,
    token: str | None = None,
    tls_root_certs: bytes | None = None,
    timeout_s: float = 30.0,
    store_id: str | None = None,
    tls_client_cert: bytes | None = None,
    tls_client_key: bytes | None = None,
) -> StoreClient:
    """A client of a live store, queried with :meth:`StoreClient.query` as a local store.

    Parameters
    ----------
    target
        A store's directory: its live owner's server is found in ``_owner.json`` and its
        credentials in the owner-only ``_serve.json`` (the store's user only). Or a Flight
        location, ``grpc+tcp://host:port`` (``grpc+tls://`` beyond loopback), with the
        server's ``token``.
    token
        The server's bearer token; required with a location, refused with a path (the
        path brings its own).
    tls_root_certs
        PEM certificates to trust for a ``grpc+tls`` location (None: the system's roots).
    timeout_s
        Deadline of each call (a query's ``wait_s`` is added to it).
    store_id
        With a location: the id of the store meant; answers of a server of another store
        raise :class:`~spark_statestore.serve.errors.WrongStoreError` (a path checks the id
        its owner wrote).
    tls_client_cert, tls_client_key
        With a location: the PEM client certificate chain and key for a server in
        mutual-TLS mode (a path's credentials file brings the certificate its server made
        for the store's own readers).

    Raises
    ------
    ServerConfigError
        If a location comes without a token, or a path with one (or with TLS settings).
    ServerUnavailableError
        If no live process serves the store at the path (open it with ``Store.open``).
    AuthenticationError
        If the store's credentials file cannot be read.
    """
    if isinstance(target, str) and "://" in target:
        if token is None:
            raise ServerConfigError(
                f"connect({target!r}) needs the server's token=...: every store server "
                "authenticates; or connect to the store's path, whose owner wrote the token "
                "next to it",
                target,
            )
        return StoreClient(
            target,
            timeout_s=timeout_s,
            token=token,
            tls_root_certs=tls_root_certs,
            store_id=store_id,
            tls_client_cert=tls_client_cert,
            tls_client_key=tls_client_key,
        )
    given = (token, tls_root_certs, tls_client_cert, tls_client_key, store_id)
    if any(value is not None for value in given):
        raise ServerConfigError(
            f"connect({os.fspath(target)!r}): a store path brings its own credentials (its "
            "owner's _serve.json); pass token, tls_root_certs, tls_client_cert, "
            "tls_client_key and store_id only with a location"
        )
    client = connect_to_owner(target, timeout_s=timeout_s)
    if client is None:
        raise ServerUnavailableError(
            f"no live process serves store {os.path.abspath(os.fspath(target))}: no owner with "
            "a Flight server in its _owner.json. Query it locally (Store.open(path).query), "
            "or start its follower or sink query, which serves it"
        )
    return client


def client_for_store(
    path: str | os.PathLike[str], location: str, *, timeout_s: float = 30.0
) -> StoreClient:
    """A client of the server at ``location`` for store ``path``, with the credentials its
    owner wrote next to the store (token, store id, TLS certificate and, for a server in
    mutual-TLS mode, the client certificate it made for the store's readers).

    Raises
    ------
    AuthenticationError
        If the store's credentials file cannot be read.
    """
    store_path = os.path.abspath(os.fspath(path))
    credentials = read_credentials(store_path)
    if credentials is None:
        raise AuthenticationError(
            f"store {store_path} is served at {location}, but its credentials file "
            f"{os.path.join(store_path, CREDENTIALS_FILE)} is missing or unreadable: read the "
            "store as the user that owns it, or ask its owner for the token "
            "(StoreClient(location, token=...))",
            location,
        )
    return StoreClient.from_credentials(location, credentials, timeout_s=timeout_s)


class IdleWatch:
    """Calls ``cancel`` when the watch stays armed for ``timeout_s`` seconds.

    A scan arms it around each wait for the server's next batch, so only time spent
    waiting on the server counts. One daemon thread per watch, woken by arm/disarm/close.
    """

    def __init__(self, cancel: Any, timeout_s: float) -> None:
        self._cancel = cancel
        self._timeout_s = timeout_s
        self._cond = threading.Condition()
        self._armed_at: float | None = None
        self._closed = False
        self.fired = False
        self._thread = threading.Thread(target=self._run, name="scan-idle-watch", daemon=True)
        self._thread.start()

    def arm(self) -> None:
        with self._cond:
            self._armed_at = time.monotonic()
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._armed_at = None
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                if self._armed_at is None:
                    self._cond.wait()
                    continue
                remaining = self._armed_at + self._timeout_s - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                self.fired = True
                self._armed_at = None
                break
        if self.fired:
            self._cancel()
