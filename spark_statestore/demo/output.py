"""What the demo's parts share: its output, Spark SQL on stores, the feed printer, waiting.

Used by both halves of the demo (:mod:`spark_statestore.demo.follow_part` and
:mod:`spark_statestore.demo.loop_part`). Spark is never imported here: the functions take
the session and the queries the demo built.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spark_statestore.demo.errors import DemoError
from spark_statestore.position import Position

__all__ = [
    "FORMAT",
    "WAIT_S",
    "FeedPrinter",
    "banner",
    "count",
    "create_view",
    "run_sql",
    "say",
    "stop_query",
    "table",
]

FORMAT = "spark_statestore"
WAIT_S = 180.0
"""How long the demo waits for anything (a delivery, a process exit) before it gives up."""


def banner(text: str) -> None:
    """A section heading of the demo's output."""
    print(f"\n=== {text}", flush=True)


def say(text: str = "") -> None:
    """One indented line of the demo's output."""
    print(f"  {text}" if text else "", flush=True)


def count(n: int, word: str) -> str:
    """``1 change``, ``3 changes``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print rows as a right-aligned text table."""
    cells = [[str(c) for c in columns]] + [
        ["null" if v is None else str(v) for v in r] for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        say("  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    if not rows:
        say("  (no rows)")


# -- Spark SQL on stores ----------------------------------------------------------------------
def create_view(spark: Any, name: str, store: Path, **options: str) -> None:
    """``CREATE OR REPLACE TEMPORARY VIEW name USING spark_statestore OPTIONS (...)``.

    PySpark 4.x replays a view's planned read for later queries of the same view (the reader
    copes: it reads the current snapshot); the demo re-creates a view right before each query
    anyway, so each printed query shows the options it runs with.
    """
    settings = {"path": str(store), **options}
    rendered = ", ".join(f"{k} '{v}'" for k, v in settings.items())
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {name} USING {FORMAT} OPTIONS ({rendered})")


def run_sql(spark: Any, sql: str) -> list[Any]:
    """Print ``sql``, run it, print its result as a table; returns the rows."""
    say(f"SQL> {sql}")
    df = spark.sql(sql)
    rows: list[Any] = df.collect()
    table(df.columns, rows)
    return rows


# -- a follower query's foreachBatch sink -----------------------------------------------------
class FeedPrinter:
    """A ``foreachBatch`` sink of a follower query's change feed: a line per micro-batch, and
    what the demo waits on (changes delivered, the merged position of their ``c`` headers).

    Parameters
    ----------
    label
        Names the query in the printed lines (``follower | micro-batch 1: ...``).
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self.delivered = 0
        self.values: Counter[Any] = Counter()
        """How often each value was delivered (None: a delete)."""
        self.position = Position.empty()
        """The merge of the delivered changes' ``c`` headers."""
        self._changed = threading.Condition()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.select("op", "value", "position").collect()
        deletes = sum(1 for r in rows if r["op"] == "delete")
        # Each change carries its decoded c header; merged, they are the batch's position.
        position = Position.empty()
        for row in rows:
            position = position.merge(Position.from_map(row["position"] or {}))
        if rows:
            say(
                f"{self.label} | micro-batch {batch_id}: {count(len(rows), 'change')} "
                f"({count(len(rows) - deletes, 'upsert')}, {count(deletes, 'delete')}), "
                f"position {position.to_json()}"
            )
        else:
            say(f"{self.label} | micro-batch {batch_id}: no changes")
        with self._changed:
            self.delivered += len(rows)
            self.values.update(r["value"] for r in rows)
            self.position = self.position.merge(position)
            self._changed.notify_all()

    def wait_for(self, changes: int, *queries: Any, timeout_s: float = WAIT_S) -> None:
        """Block until ``changes`` changes were delivered (or one of ``queries`` died, or
        time is up)."""
        self._wait(lambda: self.delivered >= changes, f"{changes} changes", queries, timeout_s)

    def wait_for_position(self, target: Position, *queries: Any, timeout_s: float = WAIT_S) -> None:
        """Block until the delivered changes' position has reached ``target`` everywhere (or
        one of ``queries`` died, or time is up)."""
        self._wait(
            lambda: self.position.dominates(target), f"position {target}", queries, timeout_s
        )

    def _wait(
        self, done: Callable[[], bool], what: str, queries: Sequence[Any], timeout_s: float
    ) -> None:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DemoError(
                        f"{self.label}: {what} not reached in {timeout_s:.0f} s (delivered "
                        f"{self.delivered} changes, position {self.position})"
                    )
                # Woken by every batch; the bounded wait only re-checks that the queries live.
                self._changed.wait(min(left, 1.0))
                for query in queries:
                    if not query.isActive:
                        raise DemoError(f"query {query.name} stopped: {query.exception()}")


# -- processes --------------------------------------------------------------------------------
def stop_query(query: Any, stores: Sequence[Path], problems: list[str]) -> None:
    """Stop a streaming query and wait until the processes that owned its stores are gone.

    Spark ends a query's reader process (a follower store's owner) soon after ``stop()``,
    not during it; a sink's commit process owns its store only while it commits.
    """
    from spark_statestore.store.ownership import read_owner, wait_for_exit

    if query.exception() is not None:
        problems.append(f"query {query.name} failed: {query.exception()}")
    query.stop()
    for store in stores:
        owner = read_owner(str(store))
        if owner is not None and not wait_for_exit(owner.pid, 60):
            problems.append(f"process {owner.pid} (the owner of {store}) did not exit")
