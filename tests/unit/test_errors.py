"""The one "did you mean" helper every unknown-name error ends with."""

from __future__ import annotations

from spark_statestore.errors import closest_hint


def test_suggests_the_closest_name_as_spelled_and_lists_them_all() -> None:
    hint = closest_hint("startingoffset", ["path", "startingOffsets"], noun="options")
    assert hint == "; did you mean 'startingOffsets'? (valid options: path, startingOffsets)"


def test_case_is_ignored_when_comparing() -> None:
    assert closest_hint("INTT", ["int", "string"], noun="types").startswith("; did you mean 'int'?")
    assert closest_hint("maxlag", ["maxLag"], noun="options").startswith("; did you mean 'maxLag'?")


def test_nothing_close_lists_the_valid_names_only() -> None:
    assert closest_hint("protobuf", ["binary", "json"], noun="formats") == (
        " (valid formats: binary, json)"
    )


def test_names_are_listed_once_in_their_order() -> None:
    assert closest_hint("x", ["b", "a", "b"], noun="values") == " (valid values: b, a)"
