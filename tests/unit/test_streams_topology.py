"""Kafka Streams topology descriptions: parsing, a store's upstream, and fuzzed input."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore.errors import TopologyError
from spark_statestore.follower.topology import StreamsTopology, parse_topology

HERE = Path(__file__).parent / "topologies"

REGROUP = (HERE / "regroup.txt").read_text()

# A foreign-key join: the two sides' sub-topologies feed each other through the
# subscription registration and response topics.
FK_JOIN = (HERE / "fk_join.txt").read_text()

GLOBAL = (HERE / "global.txt").read_text()


def test_a_store_behind_a_repartition_topic() -> None:
    upstream = parse_topology(REGROUP).upstream("regroup")
    assert upstream.inputs == {"orders"}
    assert upstream.internal == {"regroup-repartition"}


def test_a_store_fed_by_the_input_topic_has_no_internal_topic() -> None:
    upstream = parse_topology(REGROUP).upstream("totals")
    assert upstream.inputs == {"orders"}
    assert upstream.internal == frozenset()


def test_a_foreign_key_join_result_is_behind_both_subscription_topics() -> None:
    upstream = parse_topology(FK_JOIN).upstream("fkjoined")
    assert upstream.inputs == {"shipments", "customers"}
    assert upstream.internal == {
        "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000005-topic",
        "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000013-topic",
    }


def test_unknown_and_global_stores_are_refused_by_name() -> None:
    with pytest.raises(TopologyError, match=r"no store 'nope'.*regroup, totals"):
        parse_topology(REGROUP).upstream("nope")
    with pytest.raises(TopologyError, match="global store"):
        parse_topology(GLOBAL).upstream("regions-store")


def test_pattern_sources_and_topic_extractors_are_refused_with_the_alternative() -> None:
    pattern = REGROUP.replace("(topics: [regroup-repartition])", "(topicPattern: regroup.*)")
    with pytest.raises(TopologyError, match=r"by pattern.*leaderUpstreamTopics"):
        parse_topology(pattern).upstream("regroup")
    extractor = REGROUP.replace("(topic: regroup-repartition)", "(extractor class: X@1)")
    with pytest.raises(TopologyError, match=r"extractor class.*leaderUpstreamTopics"):
        parse_topology(extractor).upstream("regroup")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "no 'Sub-topology:'"),
        ("Topologies:\n", "no 'Sub-topology:'"),
        ("hello", "line 1 .*expected 'Topologies:'"),
        ("Sub-topology: 0\n  Widget: x (y)\n", "line 2 .*not a Source, Processor or Sink"),
        ("Sub-topology: 0\nSub-topology: 0\n", "repeats a sub-topology"),
        ("Sub-topology: 0\n Source: s (topics: [a, ])\n", "line 2 .*empty name"),
        ("Sub-topology: 0\n Source: s (topics: [])\n", "line 2 .*empty name"),
    ],
)
def test_text_that_is_not_a_description_names_its_line(text: str, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        parse_topology(text)


def test_a_description_with_windows_line_endings_parses_the_same() -> None:
    assert parse_topology(REGROUP.replace("\n", "\r\n")) == parse_topology(REGROUP)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_text_parses_or_raises_a_topology_error(text: str) -> None:
    _parse_and_walk(text)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_descriptions_parse_or_raise_a_topology_error(data: st.DataObject) -> None:
    text = data.draw(st.sampled_from([REGROUP, FK_JOIN, GLOBAL]))
    position = data.draw(st.integers(0, len(text)))
    cut = data.draw(st.integers(0, 20))
    insert = data.draw(st.text(max_size=10))
    mutated = text[:position] + insert + text[position + cut :]
    _parse_and_walk(mutated)


def _parse_and_walk(text: str) -> None:
    """Parse ``text`` and find every store's upstream: only TopologyError may come out."""
    try:
        topology: StreamsTopology = parse_topology(text)
    except TopologyError:
        return
    for sub in topology.subtopologies:
        for store in sub.stores:
            with contextlib.suppress(TopologyError):
                topology.upstream(store)
