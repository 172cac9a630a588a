"""The Arrow Flight server through which the owner of a store lets other processes read it.

LevelDB allows one process per database, so the process owning a live store (e.g. the
follower source's long-lived driver process) runs a :class:`StoreServer`; every other
process reads pinned or fresh snapshots of the store through a
:class:`~spark_statestore.serve.client.StoreClient`. The wire format is in
:mod:`~spark_statestore.serve.protocol`.

Why one module of over 500 lines: every call passes through the one authentication, cap
and error-mapping path of :class:`StoreServer`; the handlers themselves are short.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import FailureReason
from spark_statestore.serve.auth import (
    CLIENT_HEADER,
    ServeCredentials,
    check_token,
    new_token,
    remove_credentials,
    require_tls_beyond_loopback,
    token_matches,
    write_credentials,
)
from spark_statestore.serve.callers import CallerCounts, caller_key
from spark_statestore.serve.calls import CallStats
from spark_statestore.serve.certificates import self_signed_client_certificate
from spark_statestore.serve.errors import (
    BadRequestError,
    RemoteStoreError,
    ServeError,
    ServerConfigError,
    TooManyPinsError,
    UnknownActionError,
)
from spark_statestore.serve.key_wire import decode_key_query, encode_key_reply
from spark_statestore.serve.mutual_tls import OWN_CLIENT_NAME, check_client_ca
from spark_statestore.serve.pins import PinRegistry
from spark_statestore.serve.protocol import (
    ACTION_DESCRIBE,
    ACTION_PIN,
    ACTION_QUERY,
    ACTION_QUERY_KEY,
    ACTION_RELEASE,
    ACTION_STATS,
    ACTIONS,
    MAX_PIN_WAIT_S,
    MAX_REQUEST_BYTES,
    DescribeReply,
    ScanTicket,
    StoreDescription,
    decode_object,
    encode_error_info,
    encode_object,
)
from spark_statestore.serve.query_wire import decode_query_body, encode_result
from spark_statestore.store.errors import InvalidScanError, StoreError
from spark_statestore.store.manifest import Role
from spark_statestore.store.queries import bound_permits, is_store_wide
from spark_statestore.store.scan import ScanSpec, ScanStats, lookup_batches, scan_batches
from spark_statestore.store.snapshot import DEFAULT_BATCH_ROWS, arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.health import Health
    from spark_statestore.query import LagInfo, StateQueryRequest, StateQueryResult
    from spark_statestore.serve.client import StoreClient
    from spark_statestore.store.manifest import StoreMetadata
    from spark_statestore.store.snapshot import Snapshot
    from spark_statestore.store.store import Store

__all__ = ["MAX_RESULT_BYTES", "ActionHandler", "StoreServer"]

MAX_RESULT_BYTES = 16 * 1024 * 1024
"""The most bytes of keys and values one IQv2 range, prefix or scan reply carries by default
(its base64 JSON is about 4/3 of it): a larger answer is refused, to be read in pages."""

ActionHandler = Callable[[Mapping[str, Any], str], dict[str, Any]]
"""An extra action of a :class:`StoreServer`: (decoded JSON body, client id) -> JSON reply."""

_log = logging.getLogger(__name__)

CALL_KINDS = ("scan", "lookup", *ACTIONS, "unknown")
"""The kinds of call a store server counts: Flight reads (``scan``: ``do_get``, ``lookup``:
``do_exchange``), its actions, and ``unknown`` (an action it does not have); an owner's own
actions are added."""

_ACTION_DOCS = {
    ACTION_PIN: "Pin a snapshot of the latest commit: {} -> {snapshot_id, metadata}",
    ACTION_RELEASE: "Release a pinned snapshot: {snapshot_id} -> {released}",
    ACTION_DESCRIBE: "The latest commit, lags and owner: {} -> {...}",
    ACTION_STATS: "Cumulative do_get counters: {} -> {rows_examined, rows_returned, requests}",
    ACTION_QUERY: "Run an IQv2 request on the store: {request, wait_ms} -> {store_id, result}",
    ACTION_QUERY_KEY: "Run a single-key IQv2 request, in the compact binary form of key_wire",
}


class StoreServer:
    """Serves one open store over Arrow Flight: pinned and fresh snapshot scans, metadata.

    Parameters
    ----------
    store
        The open store to serve; the server never closes it.
    host, port
        Where to listen; loopback and a free port by default.
    lag_provider
        Returns ``{partition: LagInfo}`` for the ``describe`` action (a follower knows its
        changelog end offsets); None reports ``"lags": null``.
    health_provider
        Returns the store owner's :class:`~spark_statestore.health.Health` for the
        ``describe`` action (a follower's state, a sink server's); None reports
        ``"health": null``.
    pin_ttl_s
        A pinned snapshot unused for this many seconds is released.
    max_pins
        The most pinned snapshots alive at once.
    clock
        Monotonic seconds, for the TTL (injectable for tests).
    advertise
        Write the server's location into the store's ``_owner.json`` on :meth:`start` (and
        remove it on :meth:`close`), so other processes find it with
        :func:`~spark_statestore.serve.client.connect_to_owner`.
    batch_rows
        The most rows per streamed record batch.
    token
        The bearer token every call must carry (``authorization: Bearer <token>``); None
        draws a random one (:attr:`token`). With ``advertise``, it is written owner-only to
        the store's credentials file ``_serve.json`` for local readers.
    tls_certificates
        ``(certificate chain PEM, private key PEM)`` to serve ``grpc+tls``; required on a
        ``host`` beyond loopback.
    tls_client_ca
        PEM certificates of the CAs whose client certificates the server accepts: mutual TLS
        (:mod:`~spark_statestore.serve.mutual_tls`), with ``tls_certificates``. A client
        without a valid certificate fails the TLS handshake, before gRPC reads its calls
        (which it buffers whole before the token is checked).
    require_client_cert
        Mutual TLS even without ``tls_client_ca``: only the server's own client certificate
        is accepted (that of the credentials file and of :meth:`client`); for servers whose
        certificate the plugin made itself. Implied by ``tls_client_ca``.
    max_pins_per_client, max_pins_per_peer
        The most pins one client (its ``x-spark-statestore-client`` id, within its peer)
        holds at once, and the clients of one peer together: the identity of their client
        certificate under mutual TLS, else their network address (a client that changes its
        declared id is still held by its peer's cap; see
        :mod:`~spark_statestore.serve.callers`).
    max_waiting, max_waiting_per_client, max_waiting_per_peer
        The most ``pin`` and ``query`` calls waiting for a position bound at once (each
        holds a server thread), in all, per client and per peer.
    max_request_bytes
        The largest ticket or action body accepted.
    max_result_bytes
        The most bytes of keys and values an IQv2 range, prefix or scan reply carries: a
        larger answer is stopped while it is read and refused (``STORE_EXCEPTION``, saying
        to read in pages: ``pin`` and ``do_get``, as a routed scan does), so no reply is
        built beyond it.
    actions
        More actions, ``{name: (description, handler)}``: ``handler(body, client)`` gets the
        action's decoded JSON object and the caller's client id and returns the JSON object
        to reply (e.g. the sink's store server takes commits). They pass through the same
        authentication, size cap and error mapping as the built-in actions, whose names they
        must not take.

    Examples
    --------
    >>> with StoreServer(store) as server, server.client() as client:  # doctest: +SKIP
    ...     client.read_table(ScanSpec.everything())
    """

    def __init__(
        self,
        store: Store,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        lag_provider: Callable[[], Mapping[int, LagInfo]] | None = None,
        health_provider: Callable[[], Health] | None = None,
        pin_ttl_s: float = 600.0,
        max_pins: int = 64,
        clock: Callable[[], float] = time.monotonic,
        advertise: bool = True,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        token: str | None = None,
        tls_certificates: tuple[bytes, bytes] | None = None,
        tls_client_ca: bytes | None = None,
        require_client_cert: bool = False,
        max_pins_per_client: int = 16,
        max_pins_per_peer: int = 32,
        max_waiting: int = 16,
        max_waiting_per_client: int = 4,
        max_waiting_per_peer: int = 8,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_result_bytes: int = MAX_RESULT_BYTES,
        actions: Mapping[str, tuple[str, ActionHandler]] | None = None,
    ) -> None:
        if not isinstance(host, str) or not host.strip():
            raise ServerConfigError(f"host must be a non-empty str, got {host!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ServerConfigError(f"port must be an int in [0, 65535] (0: any), got {port!r}")
        if (
            isinstance(pin_ttl_s, bool)
            or not isinstance(pin_ttl_s, (int, float))
            or not pin_ttl_s > 0
        ):
            raise ServerConfigError(f"pin_ttl_s must be a number of seconds > 0, got {pin_ttl_s!r}")
        if isinstance(max_pins, bool) or not isinstance(max_pins, int) or max_pins < 1:
            raise ServerConfigError(f"max_pins must be an int >= 1, got {max_pins!r}")
        for name, value in (
            ("batch_rows", batch_rows),
            ("max_pins_per_client", max_pins_per_client),
            ("max_pins_per_peer", max_pins_per_peer),
            ("max_waiting", max_waiting),
            ("max_waiting_per_client", max_waiting_per_client),
            ("max_waiting_per_peer", max_waiting_per_peer),
            ("max_request_bytes", max_request_bytes),
            ("max_result_bytes", max_result_bytes),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ServerConfigError(f"{name} must be an int >= 1, got {value!r}")
        if tls_certificates is not None and (
            not isinstance(tls_certificates, tuple)
            or len(tls_certificates) != 2
            or not all(isinstance(part, bytes) and part for part in tls_certificates)
        ):
            raise ServerConfigError(
                "tls_certificates must be a (certificate chain PEM, private key PEM) tuple of "
                "non-empty bytes"
            )
        require_tls_beyond_loopback(
            host,
            tls_certificates is not None,
            names="StoreServer(tls_certificates=...), or the follower source's serveTlsCert "
            "and serveTlsKey options",
        )
        self._client_roots = _client_roots(
            tls_certificates is not None, tls_client_ca, require_client_cert
        )
        self._own_client: tuple[bytes, bytes] | None = None
        if self._client_roots is not None:
            self._own_client = self_signed_client_certificate(common_name=OWN_CLIENT_NAME)
            self._client_roots += self._own_client[0]
        extra = dict(actions or {})
        taken = sorted(set(extra) & set(ACTIONS))
        if taken:
            raise ServerConfigError(f"actions {taken} are built in; choose other names")
        self._extra_actions = extra
        self.token = new_token() if token is None else check_token(token)
        self._tls = tls_certificates
        self._max_request_bytes = max_request_bytes
        self._max_result_bytes = max_result_bytes
        self._max_waiting = max_waiting
        self._waiting_by = CallerCounts(
            per_client=max_waiting_per_client,
            per_peer=max_waiting_per_peer,
            client_option="max_waiting_per_client",
            peer_option="max_waiting_per_peer",
        )
        self.store = store
        self.host = host
        self._port = port
        self._lag_provider = lag_provider
        self._health_provider = health_provider
        self._advertise = advertise
        self._batch_rows = batch_rows
        self._pins = PinRegistry(
            ttl_s=float(pin_ttl_s),
            max_pins=max_pins,
            max_pins_per_client=max_pins_per_client,
            max_pins_per_peer=max_pins_per_peer,
            clock=clock,
            where=f"of store {store.path}",
        )
        self._lock = threading.Lock()
        self._service: Any = None
        self._thread: threading.Thread | None = None
        self._location: str | None = None
        self._closed = False
        self.calls = CallStats((*CALL_KINDS, *extra))
        """Calls answered, by kind (``scan``, ``lookup`` and the actions' names) and status."""
        self._requests = 0
        self._not_up_to_bound = 0
        self._rows_examined = 0
        self._rows_returned = 0
        self._waiting = 0

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> str:
        """Start serving (idempotent) and return the location, e.g.
        ``grpc+tcp://127.0.0.1:40123``.

        Raises
        ------
        ServeError
            If the server was closed, or cannot listen on ``host:port``.
        """
        with self._lock:
            if self._closed:
                raise ServeError(
                    f"the store server of {self.store.path} is closed; create a new StoreServer"
                )
            if self._location is not None:
                return self._location
            scheme = "grpc+tcp" if self._tls is None else "grpc+tls"
            bind = f"{scheme}://{_url_host(self.host)}:{self._port}"
            try:
                service = _service_class()(bind, self, self._tls, self._client_roots)
            except Exception as exc:  # pyarrow raises ArrowException / OSError subclasses
                raise ServeError(
                    f"cannot serve store {self.store.path} on {bind}: {exc}; choose another "
                    "host or port"
                ) from exc
            location = f"{scheme}://{_advertised_host(self.host)}:{service.port}"
            self._service = service
            self._location = location
            self._pins.where = location
            # wait() (not serve()) so that the server installs no signal handlers.
            self._thread = threading.Thread(
                target=service.wait, name=f"store-server-{self.store.name}", daemon=True
            )
            self._thread.start()
        if self._advertise:
            # Credentials first: a reader that finds the location can then authenticate.
            write_credentials(
                self.store.path,
                ServeCredentials(
                    self.token,
                    self.store.manifest.store_id,
                    None if self._tls is None else self._tls[0],
                    *(self._own_client or (None, None)),
                ),
            )
            self.store.update_owner(flight_location=location)
        _log.info("serving store %s at %s", self.store.path, location)
        return location

    @property
    def location(self) -> str:
        """The Flight location clients connect to.

        Raises
        ------
        ServeError
            If the server has not been started.
        """
        location = self._location
        if location is None:
            raise ServeError(
                f"the store server of {self.store.path} is not started; call start() first"
            )
        return location

    def client(self, **kwargs: Any) -> StoreClient:
        """A :class:`~spark_statestore.serve.client.StoreClient` of this server, with its
        token, TLS certificate, own client certificate (mutual TLS) and store id
        (``kwargs``: the client's other settings)."""
        from spark_statestore.serve.client import StoreClient

        cert, key = self._own_client or (None, None)
        return StoreClient(
            self.location,
            token=self.token,
            tls_root_certs=None if self._tls is None else self._tls[0],
            tls_client_cert=cert,
            tls_client_key=key,
            store_id=self.store.manifest.store_id,
            **kwargs,
        )

    @property
    def mutual_tls(self) -> bool:
        """Whether the server refuses clients without a valid certificate (mutual TLS)."""
        return self._client_roots is not None

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`close`."""
        return self._location is not None and not self._closed

    def close(self, *, timeout_s: float = 10.0) -> None:
        """Stop serving and release every pinned snapshot (idempotent; the store stays open).

        Waits up to ``timeout_s`` for streams in progress; a client that stopped reading a
        stream without cancelling it can hold the shutdown longer, which then finishes in
        the background.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            service, location = self._service, self._location
        if service is not None:
            stopper = threading.Thread(
                target=service.shutdown, name="store-server-shutdown", daemon=True
            )
            stopper.start()
            stopper.join(timeout_s)
            if stopper.is_alive():
                _log.warning(
                    "store server %s: streams still open after %.0f s; finishing the shutdown "
                    "in the background",
                    location,
                    timeout_s,
                )
        self._pins.close()
        if self._advertise and location is not None and not self.store.closed:
            try:
                if self.store.owner.flight_location == location:
                    self.store.update_owner(flight_location=None)
            except StoreError:  # the store was closed meanwhile: nothing to withdraw
                pass
        if self._advertise and location is not None:
            remove_credentials(self.store.path, self.token)
        _log.info("stopped serving store %s at %s", self.store.path, location)

    def __enter__(self) -> StoreServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else (self._location or "not started")
        return f"StoreServer({self.store.path!r}, {state})"

    # -- request handlers (called by the Flight service, on gRPC threads) -----------------
    def _handle_action(self, name: str, body: bytes, client: str = "") -> dict[str, Any] | bytes:
        self._pins.expire()
        self._check_size(len(body), f"body of action {name!r}")
        if name == ACTION_PIN:
            bound, wait_s = _pin_wait(decode_object(body, f"body of action {name!r}"))
            return self._pin(bound, wait_s, client=client)
        if name == ACTION_RELEASE:
            data = decode_object(body, f"body of action {name!r}")
            snapshot_id = data.get("snapshot_id")
            if not isinstance(snapshot_id, str):
                raise BadRequestError(
                    f'action "release" needs {{"snapshot_id": "<id>"}}, got {data!r}'
                )
            return {"released": self._pins.release(snapshot_id)}
        if name == ACTION_QUERY_KEY:
            request, wait_ms, with_rule = decode_key_query(body)
            result, store_wide = self._query(
                request, min(wait_ms / 1000.0, MAX_PIN_WAIT_S), client=client
            )
            return encode_key_reply(
                self.store.manifest.store_id, result, store_wide if with_rule else None
            )
        if name == ACTION_QUERY:
            request, wait_ms = decode_query_body(decode_object(body, f"body of action {name!r}"))
            result, store_wide = self._query(
                request, min(wait_ms / 1000.0, MAX_PIN_WAIT_S), client=client
            )
            return {
                "store_id": self.store.manifest.store_id,
                "store_wide": store_wide,
                "result": encode_result(result),
            }
        if name == ACTION_DESCRIBE:
            return self._describe()
        if name == ACTION_STATS:
            counters = self.counters()
            del counters["pins"]
            return counters
        extra = self._extra_actions.get(name)
        if extra is not None:
            return extra[1](decode_object(body, f"body of action {name!r}"), client)
        raise UnknownActionError(
            f"store server {self._location} has no action {name!r}; valid actions: "
            f"{', '.join([*ACTIONS, *self._extra_actions])}"
        )

    def counters(self) -> dict[str, int]:
        """What the server has done so far: ``requests`` (scans and multi-key lookups
        served), ``rows_examined`` and ``rows_returned`` (by its scans and lookups),
        ``not_up_to_bound`` (pins, lookups and queries answered from a commit short of their
        position bound, which the client refuses as NOT_UP_TO_BOUND), ``waiting`` (calls
        waiting for a position bound now) and ``pins`` (snapshots pinned now)."""
        with self._lock:
            counters = {
                "rows_examined": self._rows_examined,
                "rows_returned": self._rows_returned,
                "requests": self._requests,
                "waiting": self._waiting,
                "not_up_to_bound": self._not_up_to_bound,
            }
        counters["pins"] = len(self._pins)
        return counters

    def _pin(
        self, bound: PositionBound | None = None, wait_s: float = 0.0, *, client: str = ""
    ) -> dict[str, Any]:
        store = self.store
        self._wait_for_bound(bound, wait_s, client)
        snapshot = store.snapshot()
        self._count_bound(bound, snapshot.metadata.position)
        description = StoreDescription.of_state(store.path, store.manifest, snapshot.metadata)
        snapshot_id = self._pins.pin(snapshot, client=client)
        return {"snapshot_id": snapshot_id, "metadata": description.to_dict()}

    def _count_bound(self, bound: PositionBound | None, position: Position) -> None:
        """Count an answer from a commit at ``position`` short of ``bound``."""
        if bound is not None and not bound.permits(position):
            with self._lock:
                self._not_up_to_bound += 1

    def _wait_for_bound(self, bound: PositionBound | None, wait_s: float, client: str) -> None:
        """Wait up to ``wait_s`` for a commit that reaches ``bound`` (a pin or a lookup). The
        caller checks the position it gets, so a timeout reads the latest commit and the
        caller refuses it."""
        if bound is not None and wait_s > 0 and not bound.permits(self.store.metadata.position):
            self._wait_for_commit(lambda m: bound.permits(m.position), wait_s, client)

    def _query(
        self, request: StateQueryRequest, wait_s: float, *, client: str = ""
    ) -> tuple[StateQueryResult[Any], bool]:
        """Run ``request`` as :meth:`Store.query` does, after waiting up to ``wait_s`` for a
        commit whose position permits the request's bound on every partition it asks this
        store for (the partitions where the local answer checks the bound).

        Returns the result and whether the store checked it against the bound store-wide
        (:func:`~spark_statestore.store.queries.is_store_wide`), for the client to check it
        by the same rule."""
        store = self.store
        bound = request.position_bound
        waits = (
            wait_s > 0
            and not bound.is_unbounded()
            and request.store_name == store.name
            and not (request.active_only and store.manifest.role is Role.FOLLOWER)
        )
        if waits:
            held = store.partitions
            asked = [p for p in (request.partitions or held) if p in held]

            def reached(metadata: StoreMetadata) -> bool:
                return all(bound_permits(store, metadata, bound, p) for p in asked)

            if asked and not reached(store.metadata):
                self._wait_for_commit(reached, wait_s, client)
        before = is_store_wide(store, store.metadata)
        result = store.query(request, max_result_bytes=self._max_result_bytes)
        if any(
            answer.failure_reason is FailureReason.NOT_UP_TO_BOUND
            for answer in result.partition_results.values()
        ):
            with self._lock:
                self._not_up_to_bound += 1
        # The rule is that of the snapshot the query took, a commit between these two: when
        # they differ the stricter is told, so the client never checks more loosely.
        return result, before or is_store_wide(store, store.metadata)

    def _wait_for_commit(
        self, reached: Callable[[StoreMetadata], bool], wait_s: float, client: str
    ) -> None:
        """Wait (a counted waiter, within the caps) for a commit that ``reached`` accepts."""
        self._start_waiting(client)
        try:
            self.store.wait_for_commit(reached, wait_s)
        finally:
            with self._lock:
                self._waiting -= 1
                self._waiting_by.remove(client)

    def _start_waiting(self, client: str) -> None:
        """Count one more pin or query waiting for its bound, within the caps."""
        with self._lock:
            refused = self._waiting_by.refusal(client)
            if refused is None and self._waiting >= self._max_waiting:
                refused = f"max_waiting={self._max_waiting}"
            if refused is not None:
                raise TooManyPinsError(
                    f"store server {self._location} already has {self._waiting} calls waiting "
                    f"for a position bound ({refused}); retry later or wait for fewer bounds "
                    "at once",
                    self._location,
                )
            self._waiting += 1
            self._waiting_by.add(client)

    def _check_size(self, size: int, what: str) -> None:
        if size > self._max_request_bytes:
            raise BadRequestError(
                f"the {what} has {size:,} bytes, more than this server accepts "
                f"({self._max_request_bytes:,}); ask for fewer keys per read",
                self._location,
            )

    def _describe(self) -> dict[str, Any]:
        store = self.store
        if store.closed:
            raise RemoteStoreError(
                f"store {store.path} is closed on the server {self._location}; its owner "
                "stopped serving it: re-run the query",
                self._location,
            )
        reply = DescribeReply(
            description=StoreDescription.of_state(store.path, store.manifest, store.metadata),
            lags=None if self._lag_provider is None else self._lag_provider(),
            owner=store.owner,
            pins=len(self._pins),
            location=self._location,
            health=None if self._health_provider is None else self._health_provider(),
        )
        return reply.to_dict()

    def _handle_get(self, raw: bytes) -> Iterator[pa.RecordBatch]:
        self._pins.expire()
        self._check_size(len(raw), "ticket")
        ticket = ScanTicket.from_bytes(raw)
        if ticket.snapshot_id is not None:
            # Fail now rather than mid-stream when the pin is already gone.
            self._pins.touch(ticket.snapshot_id)
        with self._lock:
            self._requests += 1
        return self._stream(ticket.snapshot_id, ticket.scan)

    def _handle_lookup(
        self, command: bytes, chunks: Iterable[Any], client: str = ""
    ) -> tuple[pa.Schema, pa.Table]:
        """A ``do_exchange`` lookup (:mod:`~spark_statestore.serve.lookup_wire`): the rows of
        the keys in ``chunks`` (Flight chunks of one binary column) in one snapshot, taken
        once the store reached the command's bound or its wait is over."""
        import pyarrow as pa

        from spark_statestore.serve.lookup_wire import LookupRequest, reply_schema

        self._pins.expire()
        self._check_size(len(command), "lookup command")
        request = LookupRequest.from_bytes(command)
        keys = self._lookup_keys(chunks)
        with self._lock:
            self._requests += 1
        store = self.store
        self._wait_for_bound(request.bound, request.wait_s, client)
        stats = ScanStats()
        snapshot = store.snapshot()
        try:
            batches = lookup_batches(snapshot, keys, batch_rows=self._batch_rows, stats=stats)
            table = pa.Table.from_batches(list(batches), schema=arrow_schema())
            metadata = snapshot.metadata
        finally:
            snapshot.close()
            with self._lock:
                self._rows_examined += stats.rows_examined
                self._rows_returned += stats.rows_returned
        self._count_bound(request.bound, metadata.position)
        schema = reply_schema(metadata.position, store.manifest.store_id, metadata.commit_seq)
        return schema, table.replace_schema_metadata(schema.metadata)

    def _lookup_keys(self, chunks: Iterable[Any]) -> pa.Array:
        """The keys a lookup's client wrote: one binary column, at most
        ``max_request_bytes`` of them (counted as they arrive)."""
        import pyarrow as pa

        arrays: list[pa.Array] = []
        size = 0
        for chunk in chunks:
            data = chunk.data
            if data is None or not data.num_rows:
                continue
            if data.num_columns != 1:
                raise BadRequestError(
                    f"a lookup sends one column of keys, got {data.num_columns} columns",
                    self._location,
                )
            column = data.column(0)
            if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
                raise BadRequestError(
                    f"a lookup's keys are a binary column, got {column.type}", self._location
                )
            size += column.nbytes
            self._check_size(size, "lookup's keys")
            arrays.append(column.cast(pa.binary()))
        if not arrays:
            return pa.array([], pa.binary())
        return pa.concat_arrays(arrays)

    def _stream(self, snapshot_id: str | None, scan: ScanSpec) -> Iterator[pa.RecordBatch]:
        # Snapshots are taken inside the generator, so one that never runs holds nothing.
        stats = ScanStats()
        lease = None
        snapshot: Snapshot
        try:
            if snapshot_id is None:
                snapshot = self.store.snapshot()
            else:
                lease = self._pins.lease(snapshot_id)
                snapshot = lease.snapshot
            try:
                yield from scan_batches(snapshot, scan, batch_rows=self._batch_rows, stats=stats)
            finally:
                if lease is not None:
                    self._pins.unlease(lease)
                else:
                    snapshot.close()
        finally:
            with self._lock:
                self._rows_examined += stats.rows_examined
                self._rows_returned += stats.rows_returned

    def _as_serve_error(self, exc: BaseException) -> ServeError:
        """Classify a handler's failure for the client (the one place that does)."""
        if isinstance(exc, ServeError):
            return exc
        if isinstance(exc, InvalidScanError):
            return BadRequestError(str(exc), self._location)
        if isinstance(exc, StateStoreError):  # the store, or e.g. the lag provider's Kafka
            return RemoteStoreError(
                f"store {self.store.path} failed on the server {self._location}: {exc}",
                self._location,
            )
        _log.error("store server %s: internal error", self._location, exc_info=exc)
        return ServeError(
            f"internal error in the store server {self._location} ({type(exc).__name__}: "
            f"{exc}); see that process's log",
            self._location,
        )


# -- the Flight adapter ---------------------------------------------------------------------
@functools.cache
def _service_class() -> type:
    """The ``FlightServerBase`` subclass, defined on first use so that importing this module
    does not load pyarrow."""
    import pyarrow.flight as flight

    def to_flight_error(server: StoreServer, exc: BaseException) -> Exception:
        error = server._as_serve_error(exc)
        wire: Exception = flight.FlightServerError(
            str(error), extra_info=encode_error_info(error.kind, str(error))
        )
        return wire

    def guarded(server: StoreServer, batches: Iterator[pa.RecordBatch]) -> Iterator[Any]:
        try:
            yield from batches
        except Exception as exc:
            raise to_flight_error(server, exc) from exc

    class _Caller(flight.ServerMiddleware):  # type: ignore[misc]
        """An authenticated call and the client id it declared."""

        def __init__(self, client: str) -> None:
            self.client = client

    class _Authenticate(flight.ServerMiddlewareFactory):  # type: ignore[misc]
        def __init__(self, server: StoreServer) -> None:
            self._server = server

        def start_call(self, info: Any, headers: dict[str, Any]) -> _Caller:
            if not token_matches(headers, self._server.token):
                raise flight.FlightUnauthenticatedError(
                    f"store server {self._server._location} refused the call: no valid "
                    "authorization token"
                )
            declared = headers.get(CLIENT_HEADER) or [""]
            client = declared[0] if isinstance(declared[0], str) else ""
            return _Caller(client[:64])

    def caller(context: Any) -> str:
        """The call's :func:`~spark_statestore.serve.callers.caller_key`: its declared id
        within its peer (its client certificate's identity, else its network address)."""
        middleware = context.get_middleware("auth")
        declared = "" if middleware is None else str(middleware.client)
        return caller_key(declared, str(context.peer()), bytes(context.peer_identity() or b""))

    class _FlightService(flight.FlightServerBase):  # type: ignore[misc]
        def __init__(
            self,
            location: str,
            server: StoreServer,
            tls: tuple[bytes, bytes] | None,
            client_roots: bytes | None,
        ) -> None:
            # verify_client: gRPC refuses a client without a certificate signed by
            # client_roots in the TLS handshake, before it reads (and buffers) any call.
            super().__init__(
                location,
                tls_certificates=None if tls is None else [flight.CertKeyPair(*tls)],
                verify_client=client_roots is not None,
                root_certificates=client_roots,
                middleware={"auth": _Authenticate(server)},
            )
            self._server = server

        def do_action(self, context: Any, action: Any) -> list[Any]:
            server = self._server
            kind = action.type if action.type in server.calls.kinds else "unknown"
            try:
                with server.calls.call(kind):
                    body = action.body.to_pybytes() if action.body is not None else b""
                    result = server._handle_action(action.type, body, caller(context))
            except Exception as exc:
                raise to_flight_error(server, exc) from exc
            # Every reply is a JSON object but query_key's, which is encoded already.
            reply = result if isinstance(result, bytes) else encode_object(result)
            return [flight.Result(reply)]

        def do_get(self, context: Any, ticket: Any) -> Any:
            began = time.monotonic()
            try:
                batches = self._server._handle_get(ticket.ticket)
            except Exception as exc:
                self._server.calls.record("scan", False, time.monotonic() - began)
                raise to_flight_error(self._server, exc) from exc
            counted = _counted(self._server.calls, "scan", began, batches)
            return flight.GeneratorStream(arrow_schema(), guarded(self._server, counted))

        def do_exchange(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
            server = self._server
            try:
                if descriptor.command is None:
                    raise BadRequestError(
                        "a lookup's descriptor is a command (see lookup_wire)", server._location
                    )
                with server.calls.call("lookup"):
                    schema, table = server._handle_lookup(
                        descriptor.command, reader, caller(context)
                    )
            except Exception as exc:
                raise to_flight_error(server, exc) from exc
            writer.begin(schema)
            for batch in table.to_batches():
                writer.write_batch(batch)

        def list_actions(self, context: Any) -> list[tuple[str, str]]:
            extra = [(name, doc) for name, (doc, _) in self._server._extra_actions.items()]
            return [*_ACTION_DOCS.items(), *extra]

    return _FlightService


def _counted(
    calls: CallStats, kind: str, began: float, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``batches``, counted as one call of ``kind`` once the stream ends (``error`` when it
    fails or its reader goes away before its end)."""
    ok = False
    try:
        yield from batches
        ok = True
    finally:
        calls.record(kind, ok, time.monotonic() - began)


def _client_roots(tls: bool, client_ca: bytes | None, required: bool) -> bytes | None:
    """The PEM roots a mutual-TLS server checks client certificates against (its own
    client certificate is added by the caller); None: no mutual TLS."""
    if not isinstance(required, bool):
        raise ServerConfigError(f"require_client_cert must be a bool, got {required!r}")
    if client_ca is None and not required:
        return None
    if not tls:
        raise ServerConfigError(
            "mutual TLS needs TLS: give the server's own certificate and key too "
            "(StoreServer(tls_certificates=...); the Spark options serveTlsCert and "
            "serveTlsKey with serveTlsClientCa; spark-statestore serve --tls-cert and "
            "--tls-key with --tls-client-ca)"
        )
    if client_ca is None:
        return b""
    return check_client_ca(client_ca, names="tls_client_ca").rstrip() + b"\n"


def _pin_wait(body: Mapping[str, Any]) -> tuple[PositionBound | None, float]:
    """The optional ``{"position_bound": <offsets JSON object>, "wait_ms": n}`` of a pin: the
    bound and the wait in seconds (capped)."""
    from spark_statestore.serve.lookup_wire import bound_and_wait

    bound, wait_ms = bound_and_wait(body, 'action "pin"')
    if bound is None:
        return None, 0.0
    return bound, min(wait_ms / 1000.0, MAX_PIN_WAIT_S)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _advertised_host(host: str) -> str:
    """The host other processes connect to: a wildcard bind advertises this machine's name."""
    if host in ("0.0.0.0", "::", "[::]"):
        import socket

        return socket.gethostname()
    return _url_host(host)
