"""The follower source's leader options: ``leaderApplicationId`` and what narrows its wait.

``leaderApplicationId`` names an exactly-once Kafka Streams leader whose consumer group gives
the store's position (DESIGN §5); ``leaderTopology`` (the text of its
``Topology.describe()``) or ``leaderUpstreamTopics`` (its internal topics between the input
topics and the store) narrow the wait to the store's own upstream. They are read and checked
here once, so a query with a description that lacks its store fails at start, not on its
driver's follower thread.
"""

from __future__ import annotations

from spark_statestore.connectors.spark.option_table import OptionReader
from spark_statestore.errors import OptionError, TopologyError
from spark_statestore.follower.topology import parse_topology, store_of_changelog

__all__ = ["leader_options"]


def leader_options(
    options: OptionReader, changelog: str, partitions: tuple[int, ...] | None
) -> tuple[str | None, str | None, tuple[str, ...] | None]:
    """``(leaderApplicationId, leaderTopology, leaderUpstreamTopics)`` of a follower source.

    Raises
    ------
    OptionError
        A leader with a partition subset; ``leaderTopology`` or ``leaderUpstreamTopics``
        without a leader, together, or empty; a topology that cannot be read or lacks the
        changelog's store. The message names the option.
    """
    leader = options.kafka_name("leaderApplicationId", "application.id")
    if leader is not None and partitions is not None:
        raise OptionError(
            "option 'leaderApplicationId' needs a follower of every partition: the leader's "
            "committed offsets cover them all; remove 'partitions'"
        )
    topology = options.text("leaderTopology")
    upstream_text = options.text("leaderUpstreamTopics")
    upstream = None
    if upstream_text is not None:
        upstream = tuple(t.strip() for t in upstream_text.split(",") if t.strip())
        if not upstream:
            raise OptionError(
                "option 'leaderUpstreamTopics' is empty: name the internal topics, or give "
                "'leaderTopology' for a store that reads its input topics directly"
            )
    given = [
        name
        for name, value in (("leaderTopology", topology), ("leaderUpstreamTopics", upstream))
        if value is not None
    ]
    if given and leader is None:
        raise OptionError(
            f"option {given[0]!r} narrows what the leader's committed offsets wait for: set "
            "'leaderApplicationId' too, or drop it"
        )
    if len(given) == 2:
        raise OptionError(
            "options 'leaderTopology' and 'leaderUpstreamTopics' say the same thing: give one"
        )
    if topology is not None and leader is not None:
        try:
            parse_topology(topology).upstream(store_of_changelog(leader, changelog))
        except TopologyError as exc:
            raise OptionError(f"option 'leaderTopology': {exc}") from exc
    return leader, topology, upstream
