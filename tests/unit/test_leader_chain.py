"""The chain that grants an exactly-once leader's input offsets (no broker: observations)."""

from __future__ import annotations

from spark_statestore.follower.leader import LeaderChain, Observation, internal_topic_of
from spark_statestore.position import Position

APP = "app"
REP = "app-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition"
HOP = "app-hop-repartition"


def never_drained(tp: tuple[str, int], start: int, end: int) -> bool:
    return False


def observe(
    chain: LeaderChain,
    committed: dict[tuple[str, int], int],
    ends: dict[tuple[str, int], int],
    changelog_ends: dict[int, int],
    drained=never_drained,
) -> tuple[Position, dict[int, int]] | None:
    return chain.observe(Observation(committed, sorted(ends), ends, changelog_ends), drained)


def make_chain(rounds: int | None = None) -> LeaderChain:
    return LeaderChain(rounds=rounds, is_input=lambda t: not internal_topic_of(APP, t))


def test_internal_topics_are_the_apps_repartition_and_subscription_topics() -> None:
    assert internal_topic_of(APP, REP)
    assert internal_topic_of(APP, "app-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic")
    assert internal_topic_of(APP, "app-x-subscription-response-topic")
    assert not internal_topic_of(APP, "app-store-changelog")
    assert not internal_topic_of(APP, "orders")
    assert not internal_topic_of(APP, "other-x-repartition")
    assert not internal_topic_of(APP, "apprentice-x-repartition")


def test_without_internal_topics_a_sample_completes_at_once() -> None:
    chain = make_chain()
    done = observe(chain, {("orders", 0): 5}, {}, {0: 9})
    assert done == (Position.from_map({"orders": {0: 4}}), {0: 9})


def test_an_input_offset_is_granted_only_after_the_repartition_topic_is_processed() -> None:
    """The bug of the issue: the group committed orders@5 in the transaction that wrote the
    repartition topic; the store's sub-topology has not processed those records yet."""
    chain = make_chain()
    # Round 1: orders committed up to 5; the repartition topic ends at 10, committed at 4.
    assert observe(chain, {("orders", 0): 5, (REP, 0): 4}, {(REP, 0): 10}, {0: 7}) is None
    # The group processes part of the repartition topic: still short of 10.
    assert observe(chain, {("orders", 0): 6, (REP, 0): 8}, {(REP, 0): 12}, {0: 8}) is None
    # It reaches 10: the changelog ends read in this round hold orders@4's effect.
    done = observe(chain, {("orders", 0): 7, (REP, 0): 10}, {(REP, 0): 13}, {0: 11})
    assert done == (Position.from_map({"orders": {0: 4}}), {0: 11})


def test_a_chain_of_two_internal_topics_takes_two_levels() -> None:
    chain = make_chain()
    ends = {(HOP, 0): 10, (REP, 0): 20}
    assert observe(chain, {("orders", 0): 3, (HOP, 0): 0, (REP, 0): 0}, ends, {0: 1}) is None
    # Level 1 reached (both topics processed up to the first ends) ...
    level1 = {("orders", 0): 3, (HOP, 0): 10, (REP, 0): 20}
    assert observe(chain, level1, {(HOP, 0): 10, (REP, 0): 25}, {0: 2}) is None
    # ... the second level waits for what the first level wrote into REP (up to 25).
    assert observe(chain, {**level1, (REP, 0): 24}, {(HOP, 0): 10, (REP, 0): 25}, {0: 3}) is None
    done = observe(chain, {**level1, (REP, 0): 25}, {(HOP, 0): 10, (REP, 0): 25}, {0: 4})
    assert done is not None
    assert done[0] == Position.from_map({"orders": {0: 2}})
    assert done[1] == {0: 4}


def test_the_granted_position_names_the_input_topics_only() -> None:
    chain = make_chain(rounds=1)
    observe(chain, {("orders", 1): 8, ("labels", 0): 2, (REP, 0): 3}, {(REP, 0): 3}, {0: 0})
    # The first sample is reached in the same round it starts (committed == end).
    chain2 = make_chain(rounds=1)
    assert observe(chain2, {("orders", 1): 8, (REP, 0): 1}, {(REP, 0): 3}, {0: 0}) is None
    done = observe(chain2, {("orders", 1): 9, (REP, 0): 3}, {(REP, 0): 3}, {0: 5})
    assert done == (Position.from_map({"orders": {1: 7}}), {0: 5})


def test_a_committed_offset_short_of_the_end_counts_once_the_probe_finds_only_markers() -> None:
    chain = make_chain()
    probed: list[tuple[tuple[str, int], int, int]] = []

    def drained(tp: tuple[str, int], start: int, end: int) -> bool:
        probed.append((tp, start, end))
        return True

    assert observe(chain, {("orders", 0): 1, (REP, 0): 9}, {(REP, 0): 10}, {0: 3}) is None
    done = observe(chain, {("orders", 0): 1, (REP, 0): 9}, {(REP, 0): 10}, {0: 3}, drained)
    assert done == (Position.from_map({"orders": {0: 0}}), {0: 3})
    assert probed == [((REP, 0), 9, 10)]


def test_an_unreadable_committed_offset_or_end_never_advances_a_sample() -> None:
    chain = make_chain()
    assert observe(chain, {("orders", 0): 5}, {(REP, 0): 10}, {0: 7}) is None
    # The group's offset on the repartition topic is absent (unstable): not reached.
    assert observe(chain, {("orders", 0): 6}, {(REP, 0): 10}, {0: 7}) is None
    # An end that could not be read this round: nothing advances.
    missing = Observation({("orders", 0): 6, (REP, 0): 10}, [(REP, 0)], {}, {0: 7})
    assert chain.observe(missing, never_drained) is None
    assert chain.waiting_on == ((REP, 0), 10, 10) or chain.waiting_on is None


def test_samples_are_pipelined_and_the_newest_completed_is_returned() -> None:
    chain = make_chain(rounds=1)
    assert observe(chain, {("orders", 0): 1, (REP, 0): 0}, {(REP, 0): 5}, {0: 1}) is None
    assert observe(chain, {("orders", 0): 2, (REP, 0): 3}, {(REP, 0): 7}, {0: 2}) is None
    # Both samples reached in one round: the newer one (orders@2 committed) is returned.
    done = observe(chain, {("orders", 0): 3, (REP, 0): 7}, {(REP, 0): 9}, {0: 6})
    assert done == (Position.from_map({"orders": {0: 1}}), {0: 6})
