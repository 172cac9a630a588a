"""What ``spark-statestore query`` is asked (:class:`QueryOptions`) and what it answers
(:class:`Answer`), shared by the query on a store (:mod:`~spark_statestore.cli.query`) and the
query routed over a changelog's replicas (:mod:`~spark_statestore.cli.routed`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from spark_statestore.cli.keys import key_bytes
from spark_statestore.cli.query_formats import (
    REGISTRY_FORMAT_NAMES,
    registry_formats,
    registry_key_scan,
)
from spark_statestore.discovery.scan import DEFAULT_PAGE_ROWS
from spark_statestore.errors import InvalidPositionError, OptionError
from spark_statestore.position import Position, PositionBound
from spark_statestore.store.scan import ScanSpec

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.cli.store_state import StoreTarget

__all__ = ["KEY_FORMATS", "VALUE_FORMATS", "Answer", "QueryOptions"]

KEY_FORMATS = ("string", "long", "int", "double", "binary", *REGISTRY_FORMAT_NAMES)
"""How ``--key``/``--range``/``--prefix`` are written and keys shown (binary: hex; a registry
format: JSON of the key column, ``--key`` only)."""
VALUE_FORMATS = (*KEY_FORMATS, "json")
"""How values are shown (binary: hex; json: decoded with ``--value-schema``; a registry
format: as JSON)."""

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
        The DDL schema of ``json`` values (or the given schema of a registry format's).
    formats
        The reader's format options when a column is in a registry format
        (:mod:`~spark_statestore.cli.query_formats`), else None.
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
    formats: Any = None

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
        schema_registry_url: str | None = None,
        schema_registry: Sequence[str] = (),
        key_subject: str | None = None,
        value_subject: str | None = None,
        format_options: Sequence[str] = (),
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
        if key_format in REGISTRY_FORMAT_NAMES and (key_range is not None or prefix is not None):
            raise OptionError(
                f"option {'--range' if key_range is not None else '--prefix'}: {key_format} "
                "keys are not stored in the order of their values; look keys up with --key, "
                "or read --all"
            )
        formats = registry_formats(
            target=target,
            key_format=key_format,
            value_format=value_format,
            value_schema=value_schema,
            schema_registry_url=schema_registry_url,
            schema_registry=schema_registry,
            key_subject=key_subject,
            value_subject=value_subject,
            format_options=format_options,
        )
        if formats is None and (value_format == "json") != (value_schema is not None):
            raise OptionError(
                "option --value-schema gives the DDL schema of --value-format json values, and "
                "is needed with it only (e.g. --value-format json --value-schema 'id INT')"
            )
        for flag, number in (("--max-lag", max_lag), ("--limit", limit)):
            if number is not None and number < 0:
                raise OptionError(f"option {flag} must be >= 0, got {number}")
        if page_rows is not None and (changelog is None or page_rows < 1):
            raise OptionError(f"option --page-rows must be >= 1, with --changelog: {page_rows}")
        if key_format in REGISTRY_FORMAT_NAMES and keys is not None:
            if changelog is not None:
                raise OptionError(
                    f"option --key: {key_format} key lookups through --changelog's replicas "
                    "are not supported yet (a replica's key query cannot check which schema "
                    "ids its keys are under); query one replica's store by its path or "
                    "location, or read --all"
                )
            spec = registry_key_scan(formats, keys)
        else:
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
            formats=formats,
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
