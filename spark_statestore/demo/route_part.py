"""Section 8 of the demo: the replicas of one store, found through Kafka, and a router.

While the loop's two queries run, both announce themselves on
``shop-report-groups-changelog-replicas``: the leader query's store server (the sink runs with
option ``serve``) as the ``leader``, the follower query as a ``follower``. Both serve with the
one token of a shared token file (option ``serveTokenFile``), so one router can ask either.
:func:`run_routing` lists them as a :class:`ReplicaRegistry` reads them, sends a key query
through a :class:`~spark_statestore.discovery.Router` (the leader answers), stops the leader
query and its store server (a tombstone withdraws the leader), and sends the same query
again: the follower answers, with the same total at the same position.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spark_statestore.demo.output import WAIT_S, say, table

__all__ = ["TOKEN_FILE", "run_routing", "write_token_file"]

TOKEN_FILE = "replicas.token"


def write_token_file(root: Path) -> Path:
    """A fresh token, owner-only, that both queries' store servers take (``serveTokenFile``)."""
    from spark_statestore.store.files import FILE_MODE, open_private

    path = root / TOKEN_FILE
    fd = open_private(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_urlsafe(32) + "\n")
    assert path.stat().st_mode & 0o777 == FILE_MODE
    return path


def run_routing(
    bootstrap: str,
    changelog: str,
    key: str,
    token_file: Path,
    stop_leader: Callable[[], None],
    problems: list[str],
) -> None:
    """Section 8 (see the module docstring); appends what went wrong to ``problems``."""
    from spark_statestore.connectors.kafka.discovery import ReplicaRegistry
    from spark_statestore.discovery import ReplicaSet, Router
    from spark_statestore.discovery.trust import connect_replica
    from spark_statestore.query import KeyQuery, StateQueryRequest
    from spark_statestore.serve.auth import ServeCredentials
    from spark_statestore.store import Role

    credentials = ServeCredentials(token_file.read_text().strip())
    both = {Role.LEADER, Role.FOLLOWER}
    with ReplicaRegistry(bootstrap, changelog) as registry:
        found = registry.wait_for(lambda s: {r.role for r in s.replicas} == both, WAIT_S)
        if found is None:
            problems.append(
                f"the leader and the follower were not both announced: {registry.view()}"
            )
            return
        say(f"-- the live replicas of {changelog}, as announced on {changelog}-replicas")
        table(["role", "pid", "location", "partitions", "offset lag"], _rows(found))
        say()

        def connect(replica: Any) -> Any:
            # Only a verified location gets the token: here, this host's own loopback.
            return connect_replica(replica, credentials)

        request = (
            StateQueryRequest.in_store("groups")
            .with_query(KeyQuery.with_key(key.encode()))
            .enable_execution_info()
        )
        with Router(registry.view, connect) as router:
            say(f"-- Router(...).query(KeyQuery {key!r}): the leader first")
            first = _answer(router.query(request), problems)
            say()
            say("-- the leader query stops, and its store server with it (a signed withdrawal)")
            stop_leader()

            def leaderless(replicas: ReplicaSet) -> bool:
                return {r.role for r in replicas.replicas} == {Role.FOLLOWER}

            if registry.wait_for(leaderless, WAIT_S) is None:
                problems.append(f"the stopped leader is still announced: {registry.view()}")
                return
            say("-- the same query: the follower answers")
            second = _answer(router.query(request), problems)
    if first is not None and second is not None and first != second:
        problems.append(f"the leader answered {first}, the follower {second}")
    elif first is not None and second is not None:
        say("the same total at the same position, from either replica")


def _rows(found: Any) -> list[tuple[Any, ...]]:
    rows = []
    for replica in sorted(found.replicas, key=lambda r: r.role.value):
        lag = sum(info.offset_lag for info in replica.lags.values())
        partitions = ",".join(str(p) for p in replica.held_partitions)
        rows.append((replica.role.value, replica.pid, replica.location, partitions, lag))
    return rows


def _answer(result: Any, problems: list[str]) -> tuple[int | None, str] | None:
    """Print the routed answer (value, position, who answered); ``(total, position)``."""
    (partition, answer), *others = result.partition_results.items()
    if others or not answer.is_success:
        problems.append(f"the routed key query failed: {result.partition_results}")
        say(f"  failed: {result.partition_results}")
        return None
    total = None if answer.result is None else int.from_bytes(answer.result, "big", signed=True)
    say(f"  total {total}, partition {partition}, position {answer.position.to_json()}")
    for line in answer.execution_info:
        say(f"  {line[:110]}")
    return total, answer.position.to_json()
