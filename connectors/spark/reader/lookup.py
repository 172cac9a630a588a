"""Explicit key lookups of the snapshot reader: the ``keys``, ``keyPrefix``, ``keyFrom``,
``keyTo`` and ``partitions`` options.

They make a read a multi-get, a prefix or a key-range scan of the store without relying on
Spark's filter pushdown. Pushdown is only safe where Spark scopes a planned read to one
scan (see :func:`spark_scopes_pushdown_per_scan`); options are part of the relation itself,
so a DataFrame or temp view built with them returns the same rows however often Spark
replays its plan. Filters in the query still apply on top of them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from spark_statestore.errors import OptionError
from spark_statestore.partition_spec import parse_partitions
from spark_statestore.store.scan import ScanSpec

__all__ = [
    "MAX_LOOKUP_KEYS",
    "parse_lookup",
    "spark_scopes_pushdown_per_scan",
    "windowed_lookup",
]

MAX_LOOKUP_KEYS = 100_000
"""More keys than this in one ``keys`` option is a join, not a lookup: read the store and
join it in Spark."""

_HEX = "hex:"
_VERSION = re.compile(r"([0-9]+)\.([0-9]+)", re.ASCII)


def spark_scopes_pushdown_per_scan(version: str | None = None) -> bool:
    """Whether this PySpark keeps a Python source's pushed-down plan to the one scan it
    was planned for.

    PySpark 4.1 to 4.3 store the read planned during filter pushdown on the relation and
    replay it for later scans of the same DataFrame or temp view, filters or not, so a
    ``count()`` after a pushed ``WHERE key = ...`` would read one row. Spark 5.0 scopes it
    per scan (``PythonScanBuilder`` carries it into its own ``PythonScan``). The snapshot
    reader pushes filters only where this returns True.

    Parameters
    ----------
    version
        A PySpark version string; the installed PySpark's by default.
    """
    if version is None:
        import pyspark

        version = pyspark.__version__
    match = _VERSION.match(version)
    return match is not None and int(match.group(1)) >= 5


def parse_lookup(
    *,
    keys: str | None,
    prefix: str | None,
    key_from: str | None,
    key_to: str | None,
    partitions: str | None,
    key_codec: Any,
) -> ScanSpec:
    """The scan the lookup options ask for (:meth:`ScanSpec.everything` when none is set).

    Parameters
    ----------
    keys
        A JSON array of keys in the key's format: strings for ``string`` keys, numbers for
        ``long``/``int``/``double`` keys, strings for ``binary`` keys (UTF-8, or
        ``hex:0a0b`` for raw bytes), JSON of the key column for ``avro`` keys (encoded under
        each schema id that can hold them, :mod:`~spark_statestore.connectors.spark.avro_keys`).
    prefix, key_from, key_to
        Key text (``hex:`` for raw bytes): a prefix, and inclusive range ends. Only for
        ``binary`` and ``string`` keys, whose byte order is Spark's order.
    partitions
        Changelog partitions, e.g. ``0,2,5-7``.
    key_codec
        The key's :class:`~spark_statestore.connectors.spark.formats.ColumnCodec`.

    Raises
    ------
    OptionError
        Naming the option, for malformed JSON, a key the format cannot hold, or a range or
        prefix on a key format whose byte order is not Spark's order.
    """
    spec = ScanSpec.everything()
    if keys is not None:
        encoded, framed_ids = _keys(keys, key_codec)
        spec = ScanSpec(keys=tuple(encoded), framed_ids=framed_ids)
    ordered = {"keyPrefix": prefix, "keyFrom": key_from, "keyTo": key_to}
    for option, text in ordered.items():
        if text is not None and not key_codec.order_preserving:
            raise OptionError(
                f"option {option!r} needs keyFormat 'binary' or 'string' (their byte order is "
                f"Spark's order); the key format is {key_codec.format.value!r}: use 'keys', or "
                "filter in Spark"
            )
    if prefix is not None:
        spec = spec.intersect(ScanSpec.with_prefix(_key_text("keyPrefix", prefix, key_codec)))
    if key_from is not None or key_to is not None:
        lower = None if key_from is None else _key_text("keyFrom", key_from, key_codec)
        upper = None if key_to is None else _key_text("keyTo", key_to, key_codec)
        if lower is not None and upper is not None and lower > upper:
            raise OptionError(
                f"option 'keyFrom' {key_from!r} is after 'keyTo' {key_to!r}: the range would "
                "select nothing"
            )
        spec = spec.intersect(ScanSpec.between(lower, upper))
    if partitions is not None:
        spec = spec.with_partitions(parse_partitions(partitions, option="partitions"))
    return spec


def _key_text(option: str, text: str, codec: Any) -> bytes:
    if text[: len(_HEX)].lower() == _HEX:
        try:
            return bytes.fromhex(text[len(_HEX) :])
        except ValueError:
            raise OptionError(f"option {option!r} {text!r} is not valid hex after 'hex:'") from None
    try:
        return bytes(codec.encode(text if codec.format.value == "string" else text.encode()))
    except (TypeError, ValueError) as exc:
        raise OptionError(f"option {option!r}: cannot use {text!r} as a key: {exc}") from None


def _keys(text: str, codec: Any) -> tuple[list[bytes], frozenset[int] | None]:
    example = """a JSON array of keys, e.g. '["k1", "k2"]' (or '[1, 2]' for numeric keys)"""
    try:
        raw = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise OptionError(f"option 'keys' must be {example}, got {text[:200]!r}") from None
    if not isinstance(raw, list):
        raise OptionError(f"option 'keys' must be {example}, got {text[:200]!r}")
    if len(raw) > MAX_LOOKUP_KEYS:
        raise OptionError(
            f"option 'keys' lists {len(raw)} keys, more than {MAX_LOOKUP_KEYS}: read the store "
            "and join it in Spark instead"
        )
    fmt = codec.format.value
    if codec.registry_column is not None:
        from spark_statestore.connectors.spark.avro_keys import avro_lookup_keys

        return avro_lookup_keys(codec.registry_column, raw, codec.arrow_type)
    if fmt == "json":
        raise OptionError(
            "option 'keys' needs keyFormat 'binary', 'string', 'long', 'int' or 'double'; "
            "json keys have many byte forms for one value: filter them in Spark"
        )
    encoded: list[bytes] = []
    for value in raw:
        if fmt == "binary" and isinstance(value, str):
            encoded.append(_key_text("keys", value, codec))
            continue
        if isinstance(value, (list, dict)) or value is None:
            raise OptionError(
                f"option 'keys' holds {json.dumps(value)[:80]}, which is not a {fmt} key; "
                f"expected {example}"
            )
        try:
            encoded.append(bytes(codec.encode(value)))
        except (TypeError, ValueError, OverflowError) as exc:
            raise OptionError(
                f"option 'keys': {json.dumps(value)[:80]} is not a key of keyFormat {fmt!r}: {exc}"
            ) from None
    return encoded, None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def windowed_lookup(spec: ScanSpec) -> tuple[ScanSpec, ScanSpec]:
    """For a window or session store: ``(scan of stored keys, filter of user keys)``.

    The lookup options name user keys, but the store holds ``user key | window suffix``.
    The scan selects every stored key whose user key the options select (and usually few
    others): a user key prefix is a prefix of its stored keys; an exact key ``k`` is a
    prefix too (``k`` and its longer neighbours, which the filter drops); a lower bound
    stays a lower bound. An upper bound cannot bound stored keys (a user key that is a
    proper prefix of the bound sorts after it once its suffix is appended), so the scan
    goes on to the end of the store and the filter decides. The filter
    (:meth:`ScanSpec.matches_key` on the split user key) is exact.
    """
    from dataclasses import replace

    from spark_statestore.store.scan_spec import prefix_end

    key_filter = replace(spec, partitions=None, limit=None)
    lower: bytes | None = spec.lower
    upper: bytes | None = None
    keys = spec.keys
    if keys:
        ends = [prefix_end(key) for key in keys]
        lower = keys[0] if lower is None else max(lower, keys[0])
        upper = None if None in ends else max(e for e in ends if e is not None)
    scan = ScanSpec(
        keys=() if keys == () else None,
        lower=lower,
        upper=upper,
        upper_inclusive=False,
        prefix=spec.prefix,
        partitions=spec.partitions,
        limit=None,
        framed_ids=spec.framed_ids,
    )
    return scan, key_filter
