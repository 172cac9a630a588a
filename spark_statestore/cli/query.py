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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from spark_statestore.cli.errors import CommandError, StaleStoreError
from spark_statestore.cli.keys import key_bytes
from spark_statestore.discovery.scan import DEFAULT_PAGE_ROWS
from spark_statestore.errors import InvalidPositionError, OptionError
from spark_statestore.position import Position, PositionBound
from spark_statestore.store.scan import ScanSpec

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.cli.store_state import StoreTarget
    from spark_statestore.connectors.spark.formats import ColumnCodec
    from spark_statestore.query import LagInfo
    from spark_statestore.serve.protocol import StoreDescription

__all__ = ["KEY_FORMATS", "VALUE_FORMATS", "Answer", "QueryOptions", "open_answer", "run_query"]

KEY_FORMATS = ("string", "long", "int", "double", "binary")
"""How ``--key``/``--range``/``--prefix`` are written and keys shown (binary: hex)."""
VALUE_FORMATS = (*KEY_FORMATS, "json")
"""How values are shown (binary: hex; json: decoded with ``--value-schema``)."""

Output = Literal["table", "json"]
_ORDERED_NUMBERS = ("long", "int", "double")


@dataclass(frozen=True, slots=True)
class QueryOptions:
    """What ``spark-statestore query`` was asked, parsed and checked.

    Parameters
    ----------
    target
        The store: its directory, or a server's location.
    scan
        The rows to read (keys, a range, a prefix or everything; a limit).
    key_format, value_format
        How keys and values are decoded (:data:`KEY_FORMATS`, :data:`VALUE_FORMATS`).
    value_schema
        The DDL schema of ``json`` values.
    output
        ``table`` or ``json`` (one JSON object per row).
    position_bound
        The position the snapshot must have reached (NOT_UP_TO_BOUND otherwise).
    bound_timeout_s
        How long a live owner may wait for ``position_bound``.
    max_lag
        Refuse a store lagging its changelog by more records; None: no limit.
    bootstrap_servers, kafka_config
        Where to read the changelog's end offsets for ``max_lag`` when no live follower
        reports its lags.
    page_rows
        The most rows of one page of a routed scan (``--changelog``).
    """

    target: StoreTarget
    scan: ScanSpec
    key_format: str = "string"
    value_format: str = "string"
    value_schema: str | None = None
    output: Output = "table"
    position_bound: PositionBound = field(default_factory=PositionBound.unbounded)
    bound_timeout_s: float = 0.0
    max_lag: int | None = None
    bootstrap_servers: str | None = None
    kafka_config: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    page_rows: int = DEFAULT_PAGE_ROWS

    @classmethod
    def from_cli(
        cls,
        *,
        store: str | None,
        keys: Sequence[str] | None = None,
        key_range: Sequence[str] | None = None,
        prefix: str | None = None,
        key_format: str = "string",
        value_format: str = "string",
        value_schema: str | None = None,
        as_json: bool = False,
        position_bound: str | None = None,
        position_bound_timeout: float = 0.0,
        max_lag: int | None = None,
        limit: int | None = None,
        as_of: int | None = None,
        bootstrap_servers: str | None = None,
        kafka: Sequence[str] = (),
        token_file: str | None = None,
        tls_root_cert: str | None = None,
        changelog: str | None = None,
        membership_keys: str | None = None,
        page_rows: int | None = None,
        tls_client_cert: str | None = None,
        tls_client_key: str | None = None,
    ) -> QueryOptions:
        """Build the options from the command's flags (no key, range or prefix: ``--all``).

        Raises
        ------
        OptionError
            Naming the flag: an empty path, a key not written in its ``--key-format``, a
            range over numbers below zero, a prefix of a numeric key, a malformed
            ``--position-bound``, a negative ``--max-lag`` or ``--limit``, a ``json`` value
            format without ``--value-schema`` (or a schema without it), ``--page-rows``
            below 1 or without ``--changelog``.
        """
        from spark_statestore.cli.store_state import StoreTarget

        if (store is None) == (changelog is None):
            raise OptionError("query: give one of STORE and --changelog TOPIC (its replicas)")
        credentials = {
            "token_file": token_file,
            "tls_root_cert": tls_root_cert,
            "tls_client_cert": tls_client_cert,
            "tls_client_key": tls_client_key,
        }
        if store is not None:
            target = StoreTarget.from_cli(store, **credentials)
        else:
            assert changelog is not None
            if bootstrap_servers is None:
                raise OptionError(
                    "query --changelog: give --bootstrap-servers (replicas announce there)"
                )
            target = StoreTarget.for_changelog(
                changelog, membership_keys=membership_keys, **credentials
            )
        if key_format not in KEY_FORMATS:
            raise OptionError(f"option --key-format: {key_format!r} is not one of {KEY_FORMATS}")
        if value_format not in VALUE_FORMATS:
            raise OptionError(
                f"option --value-format: {value_format!r} is not one of {VALUE_FORMATS}"
            )
        if (value_format == "json") != (value_schema is not None):
            raise OptionError(
                "option --value-schema gives the DDL schema of --value-format json values, and "
                "is needed with it only (e.g. --value-format json --value-schema 'id INT')"
            )
        for flag, number in (("--max-lag", max_lag), ("--limit", limit)):
            if number is not None and number < 0:
                raise OptionError(f"option {flag} must be >= 0, got {number}")
        if page_rows is not None and (changelog is None or page_rows < 1):
            raise OptionError(f"option --page-rows must be >= 1, with --changelog: {page_rows}")
        spec = _scan_spec(keys, key_range, prefix, key_format)
        if limit is not None:
            spec = spec.with_limit(limit)
        if as_of is not None:
            spec = spec.with_as_of(as_of)
        bound = PositionBound.unbounded()
        if position_bound is not None:
            try:
                bound = PositionBound.from_json(position_bound)
            except InvalidPositionError as exc:
                raise OptionError(
                    f"option --position-bound: {exc} (expected offsets JSON like "
                    '\'{"orders": {"0": 41}}\')'
                ) from None
        kafka_config: Mapping[str, str] = MappingProxyType({})
        if kafka or bootstrap_servers is not None:
            from spark_statestore.cli.store_state import kafka_settings

            kafka_config = MappingProxyType(kafka_settings(kafka))
        return cls(
            target=target,
            scan=spec,
            key_format=key_format,
            value_format=value_format,
            value_schema=value_schema,
            output="json" if as_json else "table",
            position_bound=bound,
            bound_timeout_s=position_bound_timeout,
            max_lag=max_lag,
            bootstrap_servers=bootstrap_servers,
            kafka_config=kafka_config,
            page_rows=DEFAULT_PAGE_ROWS if page_rows is None else page_rows,
        )


@dataclass(frozen=True, slots=True)
class Answer:
    """The rows a query reads, as they stream, and the snapshot they come from.

    Parameters
    ----------
    batches
        The rows (:func:`~spark_statestore.store.snapshot.arrow_schema`), keys ascending,
        read while the snapshot stays pinned (or open).
    position, commit_seq
        The snapshot's position and commit (None: routed over several replicas).
    location
        What the rows come through (a server, the replicas); None when read from disk.
    read_position
        The position of the rows read, once they are, when it can differ from ``position``
        (a routed scan that continued on a newer snapshot); None: ``position``.
    """

    batches: Iterator[pa.RecordBatch]
    position: Position
    commit_seq: int | None
    location: str | None
    read_position: Callable[[], Position] | None = None


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


# -- keys in, values out ---------------------------------------------------------------------
def _scan_spec(
    keys: Sequence[str] | None,
    key_range: Sequence[str] | None,
    prefix: str | None,
    key_format: str,
) -> ScanSpec:
    if keys is not None:
        return ScanSpec.for_keys([key_bytes(k, key_format, "--key") for k in keys])
    if key_range is not None:
        low, high = key_range
        if key_format in _ORDERED_NUMBERS and any(t.startswith("-") for t in (low, high)):
            raise OptionError(
                f"option --range: {key_format} keys are stored big-endian, where negative "
                "numbers sort after positive ones, so a range with a negative bound is not a "
                "range of stored keys; query non-negative bounds, or read --all"
            )
        return ScanSpec.between(
            key_bytes(low, key_format, "--range"), key_bytes(high, key_format, "--range")
        )
    if prefix is not None:
        if key_format not in ("string", "binary"):
            raise OptionError(
                f"option --prefix: a prefix of {key_format} keys is not meaningful; use "
                "--key-format string or binary"
            )
        return ScanSpec.with_prefix(key_bytes(prefix, key_format, "--prefix"))
    return ScanSpec.everything()


def _codecs(options: QueryOptions) -> tuple[ColumnCodec, ColumnCodec]:
    from spark_statestore.connectors.spark.formats import ColumnCodec

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
