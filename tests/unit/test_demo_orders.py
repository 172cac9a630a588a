"""The demo's orders script and what the Kafka Streams app's stores must hold after it."""

from __future__ import annotations

from spark_statestore.demo.app import (
    ABORTED_AMOUNT,
    ORDER_CUSTOMER,
    ORDERED,
    expected_totals,
    orders_script,
)
from spark_statestore.demo.loop_part import group_totals


def test_aborted_orders_never_count_and_each_phase_adds_its_orders() -> None:
    script = orders_script()
    aborted = [t for t in script if t.aborted]
    assert len(aborted) == 1 and all(a == ABORTED_AMOUNT for _, a in aborted[0].orders)
    first, second, third = (expected_totals(n) for n in (1, 2, 3))
    assert all(total < ABORTED_AMOUNT for total in third.values())
    assert (len(first), sum(first.values())) == (50, 3040)
    assert (len(second), sum(second.values())) == (51, 3215)
    assert third[ORDER_CUSTOMER] == second[ORDER_CUSTOMER] + ORDERED
    assert {k: v for k, v in third.items() if k != ORDER_CUSTOMER} == {
        k: v for k, v in second.items() if k != ORDER_CUSTOMER
    }


def test_groups_sum_their_customers_totals() -> None:
    groups = group_totals({"cust-040": 5, "cust-049": 7, "cust-050": 1})
    assert groups == {"cust-04": 12, "cust-05": 1}
    assert group_totals(expected_totals(3))["cust-04"] == 783
