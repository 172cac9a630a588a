"""A Kafka Streams app's topology, from the text of ``Topology.describe()``: a store's upstream.

A store whose sub-topology reads an internal topic (a repartition topic, a foreign-key join's
subscription topics) gets its input's effects one or more transactions after the app commits
the input offset (DESIGN §5, "Several sub-topologies"). Which internal topics sit between the
app's input topics and a store is written in the description Kafka Streams prints::

    Topologies:
       Sub-topology: 0
        Source: KSTREAM-SOURCE-0000000000 (topics: [orders])
          --> KSTREAM-KEY-SELECT-0000000001
        ...
        Sink: KSTREAM-SINK-0000000004 (topic: counts-repartition)
          <-- KSTREAM-FILTER-0000000005

      Sub-topology: 1
        Source: KSTREAM-SOURCE-0000000006 (topics: [counts-repartition])
          --> KSTREAM-AGGREGATE-0000000003
        Processor: KSTREAM-AGGREGATE-0000000003 (stores: [counts])
          --> none
          <-- KSTREAM-SOURCE-0000000006

:func:`parse_topology` reads that text (strictly: a line it does not understand is an error
naming the line); :meth:`StreamsTopology.upstream` walks back from a store's sub-topology
through every topic another sub-topology writes. Internal topics appear in the description
without the ``<application.id>-`` prefix Kafka gives them; the caller resolves the names
against the topics that exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from spark_statestore.errors import TopologyError

__all__ = [
    "StreamsTopology",
    "SubTopology",
    "Upstream",
    "parse_topology",
    "store_of_changelog",
]

_SUBTOPOLOGY = re.compile(r"Sub-topology: (\d+)( for global store \(will not generate tasks\))?")
_SOURCE = re.compile(r"Source: (\S+) \((?:topics: \[(.*)\]|topicPattern: (.*))\)")
_PROCESSOR = re.compile(r"Processor: (\S+) \(stores: \[(.*)\]\)")
_SINK = re.compile(r"Sink: (\S+) \((?:topic: (.*)|extractor class: (.*))\)")
_EDGE = re.compile(r"(-->|<--) .*")


@dataclass(frozen=True, slots=True)
class SubTopology:
    """One sub-topology of a description.

    Parameters
    ----------
    id
        Its number.
    sources
        The topics it reads (by name; see ``patterns``).
    patterns
        Source topic patterns (``topicPattern:``): topics it reads by regular expression.
    sinks
        The topics it writes by name.
    dynamic_sinks
        Whether a sink picks its topic per record (``extractor class:``).
    stores
        The state stores its processors use.
    is_global
        A global store's sub-topology (fed by the global consumer, not the app's group).
    """

    id: int
    sources: frozenset[str] = frozenset()
    patterns: tuple[str, ...] = ()
    sinks: frozenset[str] = frozenset()
    dynamic_sinks: bool = False
    stores: frozenset[str] = frozenset()
    is_global: bool = False


@dataclass(frozen=True, slots=True)
class Upstream:
    """What a store depends on: the app's input topics and the internal topics in between.

    Parameters
    ----------
    inputs
        Topics the app reads that no sub-topology of it writes.
    internal
        Topics one sub-topology writes and another (upstream of the store) reads, as the
        description names them (without the application id prefix).
    """

    inputs: frozenset[str]
    internal: frozenset[str]


@dataclass(frozen=True, slots=True)
class StreamsTopology:
    """A parsed ``Topology.describe()``."""

    subtopologies: tuple[SubTopology, ...] = field(default=())

    def upstream(self, store: str) -> Upstream:
        """The input and internal topics upstream of ``store``.

        Raises
        ------
        TopologyError
            No sub-topology has the store, it is a global store, or a sub-topology upstream
            of it reads topics by pattern or writes through a topic extractor (then which
            topics connect them cannot be read off the description).
        """
        holders = [s for s in self.subtopologies if store in s.stores]
        if not holders:
            known = sorted({n for s in self.subtopologies for n in s.stores})
            raise TopologyError(
                f"the topology has no store {store!r} (its stores: {', '.join(known) or 'none'});"
                " give the description of the app that owns the changelog"
            )
        if any(s.is_global for s in holders):
            raise TopologyError(
                f"store {store!r} is a global store: the app's consumer group does not feed "
                "it, so its committed offsets say nothing about it"
            )
        written = {topic for s in self.subtopologies for topic in s.sinks}
        if any(s.dynamic_sinks for s in self.subtopologies if not s.is_global):
            raise TopologyError(
                "a sink of the topology picks its topic per record (extractor class): which "
                "sub-topologies it feeds cannot be read off the description; give the "
                "internal topics instead (leaderUpstreamTopics)"
            )
        inputs: set[str] = set()
        internal: set[str] = set()
        seen: set[int] = set()
        todo = list(holders)
        while todo:
            sub = todo.pop()
            if sub.id in seen:
                continue
            seen.add(sub.id)
            if sub.patterns:
                raise TopologyError(
                    f"sub-topology {sub.id} upstream of store {store!r} reads topics by "
                    f"pattern ({', '.join(sub.patterns)}); give the internal topics instead "
                    "(leaderUpstreamTopics)"
                )
            for topic in sub.sources:
                if topic in written:
                    internal.add(topic)
                    todo.extend(
                        s for s in self.subtopologies if topic in s.sinks and not s.is_global
                    )
                else:
                    inputs.add(topic)
        return Upstream(frozenset(inputs), frozenset(internal))


def parse_topology(text: str) -> StreamsTopology:
    """Parse the text of Kafka Streams' ``Topology.describe()``.

    Raises
    ------
    TopologyError
        The text is not such a description (the error names the first line it could not
        read, by number), or it has no sub-topology.
    """
    if not isinstance(text, str):
        raise TopologyError(f"a topology description is text, got {type(text).__name__}")
    subs: list[SubTopology] = []
    current: _Builder | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line == "Topologies:":
            continue
        header = _SUBTOPOLOGY.fullmatch(line)
        if header is not None:
            if current is not None:
                subs.append(current.build())
            current = _Builder(int(header.group(1)), header.group(2) is not None)
            continue
        if _EDGE.fullmatch(line):
            if current is None:
                raise _bad_line(number, raw, "an edge before any sub-topology")
            continue
        if current is None:
            raise _bad_line(number, raw, "expected 'Topologies:' or 'Sub-topology: N'")
        source = _SOURCE.fullmatch(line)
        processor = _PROCESSOR.fullmatch(line)
        sink = _SINK.fullmatch(line)
        if source is not None:
            if source.group(2) is not None:
                current.sources |= _names(source.group(2), number, raw)
            else:
                current.patterns.append(source.group(3))
        elif processor is not None:
            current.stores |= _names(processor.group(2), number, raw, allow_empty=True)
        elif sink is not None:
            if sink.group(2) is not None:
                current.sinks.add(sink.group(2).strip())
            else:
                current.dynamic_sinks = True
        else:
            raise _bad_line(number, raw, "not a Source, Processor or Sink node")
    if current is not None:
        subs.append(current.build())
    if not subs:
        raise TopologyError(
            "the topology description has no 'Sub-topology:' section; pass the text of "
            "Topology.describe().toString()"
        )
    ids = [s.id for s in subs]
    if len(set(ids)) != len(ids):
        raise TopologyError(f"the topology description repeats a sub-topology number: {ids}")
    return StreamsTopology(tuple(subs))


@dataclass(slots=True)
class _Builder:
    id: int
    is_global: bool
    sources: set[str] = field(default_factory=set)
    patterns: list[str] = field(default_factory=list)
    sinks: set[str] = field(default_factory=set)
    dynamic_sinks: bool = False
    stores: set[str] = field(default_factory=set)

    def build(self) -> SubTopology:
        return SubTopology(
            self.id,
            frozenset(self.sources),
            tuple(self.patterns),
            frozenset(self.sinks),
            self.dynamic_sinks,
            frozenset(self.stores),
            self.is_global,
        )


def _names(listed: str, number: int, raw: str, *, allow_empty: bool = False) -> frozenset[str]:
    names = [n.strip() for n in listed.split(",")] if listed.strip() else []
    if any(not n for n in names) or (not names and not allow_empty):
        raise _bad_line(number, raw, "an empty name in a list")
    return frozenset(names)


def _bad_line(number: int, raw: str, why: str) -> TopologyError:
    shown = raw if len(raw) <= 120 else raw[:117] + "..."
    return TopologyError(
        f"line {number} of the topology description is not Kafka Streams' format ({why}): "
        f"{shown!r}; pass the text of Topology.describe().toString() unchanged"
    )


def store_of_changelog(application_id: str, changelog: str) -> str:
    """The store whose changelog ``changelog`` is: ``<application_id>-<store>-changelog``.

    Raises
    ------
    TopologyError
        ``changelog`` is not named so.
    """
    prefix, suffix = f"{application_id}-", "-changelog"
    if not (
        changelog.startswith(prefix)
        and changelog.endswith(suffix)
        and len(changelog) > len(prefix) + len(suffix)
    ):
        raise TopologyError(
            f"changelog {changelog!r} is not named <application.id>-<store>-changelog for "
            f"the leader {application_id!r}: its store cannot be found in the topology"
        )
    return changelog[len(prefix) : -len(suffix)]
