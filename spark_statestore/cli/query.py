"""``spark-statestore query``: key, range and prefix lookups of a store, from the shell.

Reads one consistent snapshot: through the live owner's server when there is one (a pinned
snapshot, whose position is checked against ``--position-bound`` as the Spark snapshot reader
checks it, the owner waiting up to ``--position-bound-timeout`` for it), else by opening the
store read-only. Keys and values are decoded with the Spark reader's codecs
(:class:`~spark_statestore.connectors.spark.formats.ColumnCodec`: no Spark session is
started). A store behind the bound or lagging more than ``--max-lag`` is refused
(:class:`~spark_statestore.cli.errors.StaleStoreError`, exit 3).

A server's location (with its token) works as a path with a live owner does; a changelog's
live replicas are queried through the router (:mod:`~spark_statestore.cli.routed`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from spark_statestore.cli.errors import CommandError, StaleStoreError
from spark_statestore.cli.query_types import KEY_FORMATS, VALUE_FORMATS, Answer, QueryOptions
from spark_statestore.position import Position

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.connectors.spark.formats import ColumnCodec
    from spark_statestore.query import LagInfo
    from spark_statestore.serve.protocol import StoreDescription

# QueryOptions, Answer and the formats live in query_types (routed.py needs them too); they
# stay importable from here, where the command's callers have always found them.
__all__ = ["KEY_FORMATS", "VALUE_FORMATS", "Answer", "QueryOptions", "open_answer", "run_query"]


def run_query(options: QueryOptions) -> int:
    """Read, print (a table or JSON lines on stdout, a summary on stderr); the exit code.

    JSON lines are printed batch by batch as they arrive; a table needs every row first
    (for its column widths)."""
    key_codec, value_codec = _codecs(options)
    cells: list[list[str]] = []
    count = 0
    with open_answer(options) as answer:
        for batch in answer.batches:
            rows = zip(
                _decode(key_codec, "key", batch),
                _decode(value_codec, "value", batch),
                *(batch.column(name).to_pylist() for name in _JSON_NAMES[2:]),
                strict=True,
            )
            if options.output == "json":
                for row in rows:
                    print(json.dumps(dict(zip(_JSON_NAMES, map(_json_value, row), strict=True))))
            else:
                cells.extend([_text(value) for value in row] for row in rows)
            count += batch.num_rows
    if options.output == "table":
        from spark_statestore.cli.table import render_table

        print(render_table(_HEADERS, cells))
    sys.stdout.flush()
    via = f"through {answer.location}" if answer.location else "from the store on disk"
    commit = "" if answer.commit_seq is None else f", commit {answer.commit_seq}"
    position = answer.position if answer.read_position is None else answer.read_position()
    print(f"{count} row(s) {via}{commit}, position {position.to_json()}", file=sys.stderr)
    return 0


@contextlib.contextmanager
def open_answer(options: QueryOptions) -> Iterator[Answer]:
    """The rows ``options.scan`` selects from one snapshot that satisfies the bound and
    the lag limit: pinned on the live owner's server, or the store opened read-only, until
    the ``with`` block ends.

    Raises
    ------
    StaleStoreError
        If the snapshot has not reached the bound, or the store lags more than allowed.
    StoreNotFoundError, StoreLockedError, ServeError
        No store; a live owner that does not serve it; an unreachable or refusing server.
    """
    if options.target.changelog is not None:
        from spark_statestore.cli.routed import open_routed_answer

        with open_routed_answer(options) as answer:
            yield answer
        return
    client = options.target.client()
    if client is None:
        with _open_on_disk(options) as answer:
            yield answer
        return
    with client:
        pinned = client.pin(options.position_bound, wait_s=options.bound_timeout_s)
        try:
            _check_bound(options, pinned.position, live=True)
            if options.max_lag is not None:
                _check_lag(options, pinned.metadata, client.lags())
            batches = client.scan(options.scan, pinned.snapshot_id)
            try:
                yield Answer(batches, pinned.position, pinned.commit_seq, client.location)
            finally:
                batches.close()  # cancels the stream if the caller stopped early
        finally:
            client.release(pinned.snapshot_id)


@contextlib.contextmanager
def _open_on_disk(options: QueryOptions) -> Iterator[Answer]:
    from spark_statestore.store import Store, scan_batches

    with (
        Store.open(_path(options), purpose="spark-statestore query") as store,
        store.snapshot() as snapshot,
    ):
        _check_bound(options, snapshot.position, live=False)
        if options.max_lag is not None:
            from spark_statestore.serve.protocol import StoreDescription

            description = StoreDescription.of_state(store.path, store.manifest, snapshot.metadata)
            _check_lag(options, description, None)
        batches = scan_batches(snapshot, options.scan)
        yield Answer(batches, snapshot.position, snapshot.commit_seq, None)


def _path(options: QueryOptions) -> str:
    assert options.target.path is not None  # a location always has a client
    return options.target.path


def _check_bound(options: QueryOptions, position: Position, *, live: bool) -> None:
    """Refuse a snapshot behind ``--position-bound``; ``live``: read through an owner, which
    waited ``--position-bound-timeout`` for it (without one nothing moves the store while
    this command runs, so there is nothing to wait for)."""
    bound = options.position_bound
    if bound.permits(position):
        return
    waited = options.bound_timeout_s
    if not live:
        hint = (
            "no live owner serves the store, so there is no commit to wait for: retry once "
            "its follower or sink has reached the bound"
        )
    elif waited:
        hint = f"its owner waited {waited:g} s: retry later, or wait longer"
    else:
        hint = "retry later, or give --position-bound-timeout to let its owner wait"
    raise StaleStoreError(
        f"NOT_UP_TO_BOUND: the store at {options.target.name} is at position {position.to_json()}, "
        f"which has not reached --position-bound {bound.to_json()}; {hint}"
    )


def _check_lag(
    options: QueryOptions, commit: StoreDescription, reported: Mapping[int, LagInfo] | None
) -> None:
    """Refuse a store lagging more than ``--max-lag`` records in a partition, by the lags its
    owner ``reported`` or (``--bootstrap-servers``) the changelog's end offsets."""
    from spark_statestore.cli.store_state import changelog_lag_infos

    limit = options.max_lag
    assert limit is not None
    lags = changelog_lag_infos(commit, reported, options.bootstrap_servers, options.kafka_config)
    if lags is None:
        reason = (
            "it publishes no changelog"
            if commit.changelog_topic is None
            else "no live follower reports its lag; give --bootstrap-servers to ask the changelog"
        )
        raise CommandError(
            f"--max-lag: the lag of the store at {options.target.name} is unknown: {reason}"
        )
    behind = {p: info.offset_lag for p, info in sorted(lags.items()) if info.offset_lag > limit}
    if behind:
        raise StaleStoreError(
            f"the store at {options.target.name} lags its changelog by {behind} records "
            f"(partition: lag), more than --max-lag {limit}: retry when it has caught up, or "
            "raise --max-lag"
        )


def _codecs(options: QueryOptions) -> tuple[ColumnCodec, ColumnCodec]:
    from spark_statestore.connectors.spark.formats import ColumnCodec

    if options.formats is not None:
        from spark_statestore.connectors.spark.format_options import codecs_for

        return codecs_for(options.formats)

    schema = None
    if options.value_schema is not None:
        from spark_statestore.connectors.spark.ddl import parse_ddl

        schema = parse_ddl(options.value_schema, option="--value-schema")
    return (
        ColumnCodec.create(options.key_format, None, column="key"),
        ColumnCodec.create(options.value_format, schema, column="value"),
    )


def _decode(codec: ColumnCodec, column: str, batch: pa.RecordBatch) -> list[Any]:
    from spark_statestore.connectors.spark.errors import DecodeError

    raw = batch.column(column).to_pylist()
    partitions = batch.column("partition").to_pylist()
    offsets = batch.column("offset").to_pylist()

    def locate(index: int) -> str:
        where = (partitions[index], offsets[index])
        shown = ("unknown" if part is None else part for part in where)
        return "key {!r} (changelog partition {}, offset {})".format(
            batch.column("key")[index].as_py(), *shown
        )

    try:
        decoded, _ = codec.decode(raw, locate=locate, permissive=False)
    except DecodeError as exc:
        bad = raw[exc.index] or b""
        preview = bad[:16].hex() + ("..." if len(bad) > 16 else "")
        raise CommandError(
            f"cannot show the {codec.column} of {locate(exc.index)} as {codec.format.value} "
            f"({len(bad)} bytes: {preview or 'empty'}); try --{codec.column}-format binary"
        ) from None
    return list(decoded.to_pylist())


_HEADERS = ("KEY", "VALUE", "PARTITION", "OFFSET", "TIMESTAMP")
_JSON_NAMES = ("key", "value", "partition", "offset", "timestamp")


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dt.datetime):
        return value.isoformat(timespec="milliseconds")
    if isinstance(value, (dict, list)):
        return json.loads(json.dumps(value, default=str))
    return value


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dt.datetime):
        return value.isoformat(timespec="milliseconds")
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str, sort_keys=True)
    return str(value)
