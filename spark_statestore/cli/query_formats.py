"""``spark-statestore query`` with keys or values in a registry format (``avro``): the flags
become the Spark snapshot reader's format options, parsed by the same code
(:func:`~spark_statestore.connectors.spark.format_options.parse_formats`), so the command
decodes (and encodes ``--key``) exactly as a Spark read of the store does.

A registry subject defaults to ``<changelog>-key`` / ``<changelog>-value``, as for the reader:
the changelog is ``--changelog``'s, else the store's own (read from it when needed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spark_statestore.errors import OptionError

if TYPE_CHECKING:
    from spark_statestore.cli.store_state import StoreTarget

__all__ = ["REGISTRY_FORMAT_NAMES", "registry_formats", "registry_key_scan"]

REGISTRY_FORMAT_NAMES = ("avro", "protobuf", "jsonschema")
"""The ``--key-format`` / ``--value-format`` choices read through a schema registry (or a
given schema)."""

_FLAGS = {
    "schemaRegistryUrl": "--schema-registry-url",
    "keySubject": "--key-subject",
    "valueSubject": "--value-subject",
}


def registry_formats(
    *,
    target: StoreTarget,
    key_format: str,
    value_format: str,
    value_schema: str | None,
    schema_registry_url: str | None,
    schema_registry: Sequence[str],
    key_subject: str | None,
    value_subject: str | None,
    format_options: Sequence[str],
) -> Any:
    """The reader's :class:`~spark_statestore.connectors.spark.format_options.FormatOptions`
    for these flags, or None when neither column is in a registry format (and no registry
    flag is given).

    Raises
    ------
    OptionError
        A registry flag without a registry format, a malformed ``KEY=VALUE``, or a format
        option the reader refuses (named as the reader names it).
    SchemaError
        The registry cannot be reached, or has no such subject or version.
    """
    from spark_statestore.cli.arguments import parse_settings

    given = {
        "schemaRegistryUrl": schema_registry_url,
        "keySubject": key_subject,
        "valueSubject": value_subject,
    }
    typed = key_format in REGISTRY_FORMAT_NAMES or value_format in REGISTRY_FORMAT_NAMES
    if not typed:
        flags = [_FLAGS[name] for name, text in given.items() if text is not None]
        flags += ["--schema-registry"] * bool(schema_registry)
        flags += ["--format-option"] * bool(format_options)
        if flags:
            raise OptionError(
                f"option {flags[0]} is for --key-format or --value-format "
                f"{' or '.join(REGISTRY_FORMAT_NAMES)}: set one, or remove it"
            )
        return None
    raw: dict[str, str] = {"keyFormat": key_format, "valueFormat": value_format}
    raw.update({name: text for name, text in given.items() if text is not None})
    if value_schema is not None:
        raw["valueSchema"] = value_schema
    settings = parse_settings(
        schema_registry,
        option="--schema-registry",
        what="a schema registry client setting",
        example="basic.auth.user.info=user:secret",
    )
    raw.update({f"schemaRegistry.{name}": value for name, value in settings.items()})
    raw.update(
        parse_settings(
            format_options,
            option="--format-option",
            what="a snapshot reader format option",
            example="valueSchemaVersion=3",
        )
    )
    return _parse(raw, target)


def _parse(raw: Mapping[str, str], target: StoreTarget) -> Any:
    from spark_statestore.connectors.spark.format_options import parse_formats
    from spark_statestore.connectors.spark.option_table import OptionReader, Surface

    options = OptionReader(raw, Surface.READER)
    needs_changelog = raw.get("schemaRegistryUrl") is not None and not all(
        raw.get(f"{column}Subject") or raw[f"{column}Format"] not in REGISTRY_FORMAT_NAMES
        for column in ("key", "value")
    )
    changelog = target.changelog
    if changelog is None and needs_changelog:
        changelog = _store_changelog(target)
    return parse_formats(options, changelog=changelog)


def _store_changelog(target: StoreTarget) -> str | None:
    """The changelog topic the store at ``target`` follows or publishes (None: none)."""
    from spark_statestore.cli.store_state import read_state

    state = read_state(target, purpose="spark-statestore query (its changelog's subjects)")
    topic = state.description.changelog_topic
    return None if topic is None else str(topic)


def registry_key_scan(formats: Any, keys: Sequence[str]) -> Any:
    """The :class:`~spark_statestore.store.scan.ScanSpec` of ``--key`` values (each a JSON
    value of the key column) in a registry key format: every byte form of each key, and
    the schema ids the scan checks the store's keys against.

    Raises
    ------
    OptionError
        A ``--key`` that is not JSON, or not a key of the key column.
    """
    from spark_statestore.connectors.spark.avro_keys import avro_lookup_keys
    from spark_statestore.connectors.spark.format_options import codecs_for
    from spark_statestore.store.scan import ScanSpec

    codec = codecs_for(formats)[0]
    values = []
    for text in keys:
        try:
            values.append(json.loads(text))
        except ValueError:
            raise OptionError(
                f"option --key: {text[:80]!r} is not JSON; a {codec.format.value} key is given "
                'as JSON of the key column, e.g. --key \'{"customer": "c1"}\''
            ) from None
    encoded, framed_ids = avro_lookup_keys(codec.registry_column, values, codec.arrow_type)
    return ScanSpec(keys=tuple(encoded), framed_ids=framed_ids)
