"""Store servers that do not answer as this version's do, for the askers' checks: a real
store whose answers ignore the request's position bound (a bug, or a lie, on the server's
side), and a real server that speaks the protocol as a server older than the bound rule in
query replies did. Both are the real classes with one method overridden; the clients and
routers that ask them are the real ones."""

from __future__ import annotations

from typing import Any

from spark_statestore.position import PositionBound
from spark_statestore.query import StateQueryRequest, StateQueryResult
from spark_statestore.serve import BadRequestError, StoreServer
from spark_statestore.serve.protocol import ACTION_QUERY, ACTION_QUERY_KEY
from spark_statestore.store import Store

RULE_FLAG = 16
"""The ``query_key`` body's flag asking for the bound rule in the reply."""
_FLAGS_BYTE = 2  # version, query type, flags, ...


class UnboundedStore(Store):
    """A store that answers every query as if the request had no position bound: it says
    success, with its real position, under a bound it has not reached."""

    def query(self, request: StateQueryRequest, **options: Any) -> StateQueryResult[Any]:
        return super().query(request.with_position_bound(PositionBound.unbounded()), **options)

    def honest_query(self, request: StateQueryRequest) -> StateQueryResult[Any]:
        """The answer the store gives when it checks the bound, as every store does."""
        return super().query(request)


class OlderServer(StoreServer):
    """A server of the version before query replies said the bound rule: it refuses the
    ``query_key`` flag asking for it as unknown, and its JSON replies have no
    ``store_wide``. ``asked`` records each call's action and, for ``query_key``, whether
    it carried the flag."""

    def __init__(self, store: Store, **options: Any) -> None:
        super().__init__(store, **options)
        self.asked: list[tuple[str, bool]] = []

    def _handle_action(self, name: str, body: bytes, client: str = "") -> dict[str, Any] | bytes:
        flagged = name == ACTION_QUERY_KEY and bool(body[_FLAGS_BYTE] & RULE_FLAG)
        self.asked.append((name, flagged))
        if flagged:
            raise BadRequestError(f'action "query_key": unknown flags {body[_FLAGS_BYTE]:#04x}')
        reply = super()._handle_action(name, body, client)
        if name == ACTION_QUERY and isinstance(reply, dict):
            del reply["store_wide"]
        return reply
