"""What :func:`~spark_statestore.connectors.spark.enrich.enrich`'s executor tasks run, per
Arrow batch of the input: the keys encoded (binary and string keys in Arrow, other formats key
by key), deduplicated, looked up in one snapshot (through the driver's store host, in this
process, or through the router of a changelog's replicas), matched with the reply and the
values decoded, column-wise; the snapshot's position checked against the rows' bound.

:class:`Plan` is what the driver ships to every task (picklable).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.spark.errors import NotUpToBoundError, SparkSourceError
from spark_statestore.connectors.spark.option_table import ValueFormat
from spark_statestore.connectors.spark.reader.routed import ReplicaRoute
from spark_statestore.connectors.spark.worker_gc import freeze_long_lived
from spark_statestore.errors import InvalidPositionError
from spark_statestore.position import Position, PositionBound

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.connectors.spark.formats import ColumnCodec
    from spark_statestore.connectors.spark.host import HostRef, StoreHostClient

__all__ = [
    "Found",
    "Lookup",
    "Plan",
    "enrich_batches",
    "enrich_with",
    "found_arrays",
    "lookup_here",
    "lookup_on_host",
]


@dataclass(frozen=True)
class Plan:
    """What every executor task needs (picklable)."""

    path: str | None
    """The store's absolute path on the driver's host (None: ``route``)."""
    host: HostRef | None
    """The driver's store host, through which tasks look keys up in the store."""
    route: ReplicaRoute | None
    key_index: int
    key_codec: ColumnCodec
    value_codec: ColumnCodec
    position_index: int | None
    wait_s: float
    names: tuple[str, ...]
    """The output columns: the input's, the value, and the lookup position if asked."""

    @property
    def store(self) -> str:
        """What the lookups read, for messages."""
        if self.route is not None:
            return self.route.name
        return f"store {self.path}"

    @property
    def local_path(self) -> str:
        """The store directory on the driver's host."""
        assert self.path is not None
        return self.path


Found = tuple["pa.Array", "pa.Array", Position]
"""The keys found, their values (binary arrays, row for row) and the snapshot's position."""
Lookup = Callable[[Plan, "pa.Array", PositionBound, "frozenset[int] | None"], Found]
"""``(plan, keys, bound, framed_ids)``: the keys found in one snapshot; with ``framed_ids``
(registry-framed keys encoded under those schema ids) after checking the snapshot holds no
key framed with another id."""


def enrich_batches(batches: Iterator[pa.RecordBatch], plan: Plan) -> Iterator[pa.RecordBatch]:
    """The enriched batches of one task (``mapInArrow``'s function)."""
    freeze_long_lived()  # a task in a reused Python worker
    if plan.host is not None:
        from spark_statestore.connectors.spark.host import StoreHostClient

        # One client per task: every batch's keys go to the store host in one exchange.
        with StoreHostClient(plan.host) as host:

            def on_host(
                plan: Plan, keys: pa.Array, bound: PositionBound, ids: frozenset[int] | None
            ) -> Found:
                return lookup_on_host(host, plan, keys, bound, ids)

            yield from enrich_with(batches, plan, on_host)
        return
    if plan.route is None:
        yield from enrich_with(batches, plan, lookup_here)
        return
    from spark_statestore.connectors.spark.reader.routed import routed_key_lookup

    # One router per task: the announcements are read once, the replicas' clients kept.
    with routed_key_lookup(plan.route) as lookup:

        def routed(
            plan: Plan, keys: pa.Array, bound: PositionBound, ids: frozenset[int] | None
        ) -> Found:
            assert ids is None, "registry-framed keys are refused for replicas when planned"
            found, position = lookup(sorted(keys.to_pylist()), bound, plan.wait_s)
            return found_arrays(found.keys(), found.values(), position)

        yield from enrich_with(batches, plan, routed)


def enrich_with(
    batches: Iterator[pa.RecordBatch], plan: Plan, lookup: Lookup
) -> Iterator[pa.RecordBatch]:
    """Each batch with its keys' values: the keys encoded, deduplicated and matched with
    what the lookup found column-wise in Arrow (no Python object per row for binary and
    string keys and values)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for batch in batches:
        column = batch.column(plan.key_index)
        bound = _bound(batch, plan)
        if plan.key_codec.registry_column is not None:
            values, position = _framed_values(plan, column, bound, lookup)
        else:
            encoded = encoded_keys(plan, column)
            wanted = pc.unique(encoded.drop_null()) if encoded.null_count else pc.unique(encoded)
            found_keys, found_values, position = lookup(plan, wanted, bound, None)
            # Row i's value: the found value of its key; null for a null or absent key.
            values = found_values.take(pc.index_in(encoded, value_set=found_keys))
        array, _ = plan.value_codec.decode_array(
            values, locate=_locator(plan.store, column), permissive=False
        )
        arrays = [*batch.columns, array]
        if len(plan.names) > len(arrays):  # the lookup position column
            arrays.append(pa.array([position.to_json()] * batch.num_rows, pa.string()))
        yield pa.RecordBatch.from_arrays(arrays, names=list(plan.names))


def _framed_values(
    plan: Plan, column: pa.Array, bound: PositionBound, lookup: Lookup
) -> tuple[pa.Array, Position]:
    """Each row's value for a registry-framed (Avro) key: every byte form of the key looked
    up in one snapshot that holds no key under another schema id; a key found under two
    ids (two entries for one logical key) fails, naming both."""
    import pyarrow as pa

    from spark_statestore.connectors.spark.avro_keys import avro_key_forms

    typed = plan.key_codec.registry_column
    assert typed is not None
    forms, ids = avro_key_forms(
        typed, column.to_pylist(), plan.key_codec.arrow_type, what=f"enrich ({plan.store})"
    )
    wanted = pa.array(sorted({raw for key_forms in forms for raw in key_forms}), pa.binary())
    found_keys, found_values, position = lookup(plan, wanted, bound, ids)
    found = dict(zip(found_keys.to_pylist(), found_values.to_pylist(), strict=True))
    values: list[bytes | None] = []
    for index, key_forms in enumerate(forms):
        hits = [raw for raw in key_forms if raw in found]
        if len(hits) > 1:
            framed = ", ".join(str(int.from_bytes(raw[1:5], "big", signed=True)) for raw in hits)
            raise SparkSourceError(
                f"enrich: row {index} of a batch has key {column[index].as_py()!r}, which "
                f"{plan.store} holds under schema ids {framed}: two entries for one key "
                "(written before and after a key schema change); the lookup cannot choose "
                "one. Read the store with Spark and join instead"
            )
        values.append(found[hits[0]] if hits else None)
    return pa.array(values, pa.binary()), position


def encoded_keys(plan: Plan, column: pa.Array) -> pa.Array:
    """The stored bytes of each row's key (a binary array; null for a null key): binary
    keys as they are and string keys as their UTF-8 bytes in Arrow, other formats (or
    columns of another type than the format's, which fail naming the row) key by key."""
    import pyarrow as pa

    from spark_statestore.connectors.spark.errors import EncodeError

    kind, fmt = column.type, plan.key_codec.format
    if (
        fmt is ValueFormat.BINARY and (pa.types.is_binary(kind) or pa.types.is_large_binary(kind))
    ) or (
        fmt is ValueFormat.STRING and (pa.types.is_string(kind) or pa.types.is_large_string(kind))
    ):
        return column.cast(pa.binary())
    encoded: list[bytes | None] = []
    for index, key in enumerate(column.to_pylist()):
        if key is None:
            encoded.append(None)
            continue
        try:
            encoded.append(plan.key_codec.encode(key))
        except EncodeError as exc:
            raise SparkSourceError(
                f"enrich: row {index} of a batch has key {key!r}, which is not a "
                f"{plan.key_codec.format.value} key of {plan.store}: {exc}"
            ) from exc
    return pa.array(encoded, pa.binary())


def found_arrays(
    keys: Iterable[bytes], values: Iterable[bytes | None], position: Position
) -> Found:
    import pyarrow as pa

    return pa.array(list(keys), pa.binary()), pa.array(list(values), pa.binary()), position


def _locator(store: str, keys: pa.Array) -> Callable[[int], str]:
    def locate(index: int) -> str:
        return f"{store} key {keys[index].as_py()!r}"

    return locate


def _bound(batch: pa.RecordBatch, plan: Plan) -> PositionBound:
    """The merged positions of the batch's rows (unbounded without a position column)."""
    if plan.position_index is None:
        return PositionBound.unbounded()
    merged = Position.empty()
    for index, raw in enumerate(batch.column(plan.position_index).to_pylist()):
        if raw is None:
            continue
        try:
            if isinstance(raw, str):
                position = Position.from_json(raw)
            else:
                position = Position.from_map(_as_map(raw))
        except (InvalidPositionError, TypeError, ValueError) as exc:
            raise SparkSourceError(
                f"enrich: row {index} of a batch has position {raw!r}, which is not an "
                f'offsets map or offsets JSON like {{"orders": {{"0": 41}}}}: {exc}'
            ) from exc
        merged = merged.merge(position)
    return PositionBound.at(merged)


def _as_map(raw: Any) -> dict[str, dict[int, int]]:
    """Arrow's ``map<string, map<int, bigint>>`` as Python: a list of (key, value) pairs."""
    outer = raw.items() if isinstance(raw, Mapping) else raw
    result: dict[str, dict[int, int]] = {}
    for topic, partitions in outer:
        inner = partitions.items() if isinstance(partitions, Mapping) else partitions
        result[topic] = {int(p): int(o) for p, o in inner}
    return result


def lookup_on_host(
    host: StoreHostClient,
    plan: Plan,
    keys: pa.Array,
    bound: PositionBound,
    framed_ids: frozenset[int] | None = None,
) -> Found:
    """The ``keys`` present in one snapshot of the store, read on its host (through its
    live owner, pinned, or a private checkpoint), their values and its position."""
    deadline = time.monotonic() + plan.wait_s
    table, position = host.lookup(plan.local_path, keys, bound, plan.wait_s, framed_ids)
    _check(plan, bound, position, deadline)
    return _columns(table, position)


def lookup_here(
    plan: Plan, keys: pa.Array, bound: PositionBound, framed_ids: frozenset[int] | None = None
) -> Found:
    """:func:`lookup_on_host` in this process (no Spark driver planned it: the task runs on
    the store's host)."""
    from spark_statestore.connectors.spark.host.reads import lookup_current

    deadline = time.monotonic() + plan.wait_s
    purpose = "Spark enrichment lookup"
    table, position = lookup_current(
        plan.local_path,
        keys,
        purpose=purpose,
        bound=bound,
        wait_s=plan.wait_s,
        framed_ids=framed_ids,
    )
    _check(plan, bound, position, deadline)
    return _columns(table, position)


def _check(plan: Plan, bound: PositionBound, position: Position, deadline: float) -> None:
    if not bound.permits(position):
        waited = f" after waiting {plan.wait_s:g} s" if plan.wait_s else ""
        raise NotUpToBoundError(
            f"NOT_UP_TO_BOUND: {plan.store} is at position {position.to_json()}, not yet "
            f"at the rows' positions {json.dumps(bound.to_dict())}{waited}; raise "
            "position_timeout_ms to wait longer for it"
        )


def _columns(table: pa.Table, position: Position) -> Found:
    """The key and value columns of a lookup's reply (binary, one chunk each)."""
    import pyarrow as pa

    keys = table.column("key").combine_chunks().cast(pa.binary())
    values = table.column("value").combine_chunks().cast(pa.binary())
    return keys, values, position
