"""Checks every bench suite's smoke test makes of measurements without a target."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from spark_statestore.bench.measure import Measurement


def one_round_each(
    measurements: Sequence[Measurement], suite: str, names: Sequence[str]
) -> dict[str, Measurement]:
    """Assert ``measurements`` are exactly ``names`` of ``suite``, in order, each one
    interleaved round with positive rates, no target and a consistent ratio; returns them
    by name."""
    by_name = {m.name: m for m in measurements}
    assert list(by_name) == list(names)
    for m in measurements:
        assert m.suite == suite
        assert m.target is None and m.status == "-"
        assert len(m.candidate_rates) == len(m.baseline_rates) == 1
        assert m.candidate_rate > 0 and m.baseline_rate > 0
        assert m.ratio == pytest.approx(m.candidate_rate / m.baseline_rate)
        json = m.to_json()
        assert json["ratio"] == pytest.approx(m.ratio) and json["status"] == "-"
    return by_name
