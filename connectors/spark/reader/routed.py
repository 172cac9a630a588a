"""Looking keys up in the live replicas of a changelog on any host, through the router.

The replicas announce themselves on ``<changelog>-replicas``; a
:class:`~spark_statestore.connectors.kafka.discovery.ReplicaRegistry` reads the
announcements and a :class:`~spark_statestore.discovery.Router` sends each key's
``KeyQuery`` to a replica of the key's partition (the leader first, then the least lagging
follower within ``max_lag``, failing over), reached with the token the replicas share. IQv2
has no multi-key query, so a lookup is one round trip per key. Used by
:func:`~spark_statestore.connectors.spark.enrich.enrich` with ``changelog=``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from spark_statestore.connectors.spark.errors import NotUpToBoundError, SparkSourceError
from spark_statestore.position import Position, PositionBound
from spark_statestore.serve.auth import ServeCredentials

__all__ = ["KeyLookup", "ReplicaRoute", "routed_key_lookup"]

KeyLookup = Callable[[list[bytes], PositionBound, float], tuple[dict[bytes, bytes], Position]]
"""``lookup(keys, bound, wait_s)``: ``{key: value}`` of the keys present, and the merge of
the answers' positions."""


@dataclass(frozen=True, slots=True)
class ReplicaRoute:
    """The live replicas of a changelog and how to reach them (picklable).

    Parameters
    ----------
    changelog
        The changelog whose replicas to ask.
    bootstrap_servers, kafka_config
        The Kafka cluster of its replicas topic, and librdkafka settings to read it.
    credentials
        The token every replica takes and, for ``grpc+tls`` replicas, the certificates to
        trust and the client certificate to present to replicas in mutual-TLS mode (the
        replicas are many stores: no store id).
    max_lag
        Skip followers lagging by more than this on the key's partition (None: any).
    membership_keys
        PEM public keys the replicas' announcements must be signed with (empty: none is
        believed).
    """

    changelog: str
    bootstrap_servers: str
    credentials: ServeCredentials
    max_lag: int | None = None
    kafka_config: tuple[tuple[str, str], ...] = ()
    membership_keys: bytes = b""

    @property
    def name(self) -> str:
        """The replicas, for messages."""
        return f"the replicas of {self.changelog}"


@contextlib.contextmanager
def routed_key_lookup(route: ReplicaRoute) -> Iterator[KeyLookup]:
    """A :data:`KeyLookup` over ``route``'s replicas as announced when it starts: the
    announcements are read once, the replicas' clients kept until the block ends."""
    from spark_statestore.connectors.kafka.discovery import ReplicaRegistry
    from spark_statestore.discovery import Router
    from spark_statestore.discovery.signing import MembershipKeys
    from spark_statestore.discovery.trust import connect_replica

    def connect(replica: Any) -> Any:
        return connect_replica(replica, route.credentials)

    keys = (
        MembershipKeys.from_pem(route.membership_keys, "enrich's membership_keys_file")
        if route.membership_keys
        else MembershipKeys({}, "enrich's membership keys (none: the default key is missing)")
    )
    config = dict(route.kafka_config)
    with (
        ReplicaRegistry(
            route.bootstrap_servers, route.changelog, config=config, keys=keys
        ) as registry,
        Router(registry.view, connect, max_lag=route.max_lag) as router,
    ):
        registry.refresh()

        def lookup(
            keys: list[bytes], bound: PositionBound, wait_s: float
        ) -> tuple[dict[bytes, bytes], Position]:
            return _lookup(router, route, keys, bound, wait_s)

        yield lookup


def _lookup(
    router: Any, route: ReplicaRoute, keys: list[bytes], bound: PositionBound, wait_s: float
) -> tuple[dict[bytes, bytes], Position]:
    """Each key's ``KeyQuery``, answered by a replica of its partition that has reached
    ``bound`` there (Kafka Streams' rule: the bound's entries for that partition; the whole
    bound where the replica's position holds store-wide), all within ``wait_s``. The router
    and the replicas' clients check each answer's position against ``bound`` again: an
    answer from a replica that has not reached it is never used (the next replica is asked,
    and with none left the lookup fails NOT_UP_TO_BOUND)."""
    from spark_statestore.query import FailureReason, KeyQuery, StateQueryRequest

    deadline = time.monotonic() + wait_s
    found: dict[bytes, bytes] = {}
    position = Position.empty()
    for key in keys:
        request = (
            StateQueryRequest.in_store(route.changelog)
            .with_query(KeyQuery.with_key(key))
            .with_position_bound(bound)
        )
        result = router.query(request, wait_s=max(0.0, deadline - time.monotonic()))
        for partition, answer in sorted(result.partition_results.items()):
            if not answer.is_success:
                where = f"{route.name}, partition {partition}, key {key!r}"
                if answer.failure_reason is FailureReason.NOT_UP_TO_BOUND:
                    waited = f" (after waiting {wait_s:g} s)" if wait_s else ""
                    raise NotUpToBoundError(
                        f"NOT_UP_TO_BOUND: {where}: {answer.failure_message}{waited}; wait "
                        "longer for the bound (enrich: position_timeout_ms) or allow more lag "
                        "(max_lag)"
                    )
                reason = answer.failure_reason
                raise SparkSourceError(
                    f"{where}: {'failure' if reason is None else reason.value}: "
                    f"{answer.failure_message}"
                )
            position = position.merge(answer.position)
            if answer.result is not None:
                found[key] = bytes(answer.result)
    return found, position
