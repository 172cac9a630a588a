"""A schema registry reached with confluent-kafka's ``SchemaRegistryClient``.

:class:`RegistrySettings` is what a plan carries (picklable; the credentials it holds are
kept out of its ``repr``); :func:`registry_for` gives the process's :class:`SchemaRegistry`
for them, one per process and settings, so a Spark worker asks the registry for a schema
id once however many tasks it runs. The client's own cache holds every schema it fetched.

Failures are classified here, once: a schema, subject or version the registry does not
have is :class:`SchemaNotFoundError`; a registry that cannot be reached, refuses the
credentials or answers an error is :class:`RegistryError`. Every message names the
registry's URL (without credentials) and what to check.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

# The HTTP library of confluent-kafka's registry client (on Python >= 3.10).
from httpx2 import TransportError

from spark_statestore.connectors.schema_registry.errors import (
    RegistryError,
    RegistrySettingError,
    SchemaError,
    SchemaNotFoundError,
)
from spark_statestore.schemas.avro import AvroSchema
from spark_statestore.schemas.jsonschema import JsonSchema
from spark_statestore.schemas.protobuf import ProtobufSchema

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "SCHEMA_TYPES",
    "RegisteredSchema",
    "RegistrySettings",
    "SchemaRegistry",
    "registry_for",
]

SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "jsonschema": "JSON"}
"""Each registry format (``keyFormat``/``valueFormat``) by the schema type the registry
names it (``schemaType``)."""
_NOT_FOUND = {40401: "subject", 40402: "version", 40403: "schema"}
_AUTH_STATUSES = (401, 403)
DEFAULT_TIMEOUT_S = 30
"""Seconds a registry request may take (``schemaRegistry.timeout``)."""
_NUMERIC_SETTINGS = frozenset(
    {
        "timeout",
        "cache.capacity",
        "cache.latest.ttl.sec",
        "max.retries",
        "retries.wait.ms",
        "retries.max.wait.ms",
    }
)


@dataclass(frozen=True, repr=False)
class RegistrySettings:
    """Where the registry is and how to reach it.

    Parameters
    ----------
    url
        The registry's base URL (its Confluent-compatible API: for Apicurio Registry,
        ``http://host:8080/apis/ccompat/v7``). Several, comma-separated, are tried in turn.
    config
        The client's other settings, named as confluent-kafka's ``SchemaRegistryClient``
        names them: ``basic.auth.user.info``, ``basic.auth.credentials.source``,
        ``bearer.auth.credentials.source``, ``bearer.auth.token``, ``ssl.ca.location``,
        ``ssl.certificate.location``, ``ssl.key.location``, ``timeout``, ``max.retries``...
    """

    url: str
    config: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # the URL and settings may hold credentials
        return f"RegistrySettings(url={self.shown_url!r}, settings={sorted(self.config)})"

    @classmethod
    def from_options(cls, url: str, config: Mapping[str, str], *, prefix: str) -> RegistrySettings:
        """Check the settings as the client does (it refuses unknown names) without a
        request.

        Raises
        ------
        RegistrySettingError
            Naming the option (``prefix`` + the client's setting name).
        """
        settings = cls(url, dict(config))
        if "url" in settings.config:
            raise RegistrySettingError(
                f"option '{prefix}url' cannot be set: give the registry's URL as "
                "option 'schemaRegistryUrl'"
            )
        try:
            SchemaRegistryClient(settings.client_config())
        except (ValueError, TypeError) as exc:
            raise RegistrySettingError(
                f"the schema registry client refuses its settings ({prefix}*): {exc}"
            ) from None
        return settings

    def client_config(self) -> dict[str, Any]:
        """The client's configuration (its numeric settings as numbers: options are text)."""
        config: dict[str, Any] = {}
        for name, value in self.config.items():
            if name in _NUMERIC_SETTINGS:
                try:
                    config[name] = float(value) if "." in value else int(value)
                except ValueError:
                    raise RegistrySettingError(
                        f"schema registry setting {name!r} must be a number, got {value!r}"
                    ) from None
            else:
                config[name] = value
        # The client waits forever for an answer without one: a registry that accepted the
        # connection and never answers must fail a query, not hang it.
        config.setdefault("timeout", DEFAULT_TIMEOUT_S)
        return {**config, "url": self.url}

    @property
    def shown_url(self) -> str:
        """The URL without any credentials in it, for messages."""
        return ", ".join(_without_credentials(url) for url in self.url.split(","))


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry holds it."""

    schema_id: int
    schema_type: str
    """``AVRO``, ``PROTOBUF`` or ``JSON``."""
    text: str
    references: tuple[tuple[str, str], ...] = ()
    """The referenced schemas (the name they are referenced by, their text), each before
    those that use it."""
    subject: str | None = None
    version: int | None = None


class SchemaRegistry:
    """One registry, through confluent-kafka's client.

    Use :func:`registry_for` to share one per process.
    """

    def __init__(self, settings: RegistrySettings) -> None:
        self.settings = settings
        self._client = SchemaRegistryClient(settings.client_config())

    def by_id(self, schema_id: int, *, subject: str | None = None) -> RegisteredSchema:
        """The schema registered under ``schema_id`` (cached by the client).

        Raises
        ------
        SchemaNotFoundError, RegistryError
        """
        what = f"schema id {schema_id}"
        schema = self._call(what, lambda: self._client.get_schema(schema_id, subject))
        return RegisteredSchema(
            schema_id,
            str(schema.schema_type or "AVRO"),
            str(schema.schema_str),
            self._references(schema, what),
        )

    def version(self, subject: str, version: int | None) -> RegisteredSchema:
        """Version ``version`` of ``subject``, its latest when None.

        Raises
        ------
        SchemaNotFoundError, RegistryError
        """
        which = "the latest version" if version is None else f"version {version}"
        what = f"{which} of subject {subject!r}"
        if version is None:
            # The client caches the latest version for good unless told otherwise: a query
            # planned after a new version was registered would read as an older one.
            self._client.clear_latest_caches()  # type: ignore[no-untyped-call]
            found = self._call(what, lambda: self._client.get_latest_version(subject))
        else:
            found = self._call(what, lambda: self._client.get_version(subject, version))
        schema = found.schema
        return RegisteredSchema(
            int(found.schema_id),
            str(schema.schema_type or "AVRO"),
            str(schema.schema_str),
            self._references(schema, what),
            subject,
            int(found.version),
        )

    def lookup(self, subject: str, text: str, schema_type: str = "AVRO") -> int | None:
        """The id under which ``subject`` has the schema ``text``, None when it does not.

        Raises
        ------
        RegistryError
        """
        schema = Schema(text, schema_type)
        what = f"the given schema under subject {subject!r}"
        try:
            found = self._call(what, lambda: self._client.lookup_schema(subject, schema))
        except SchemaNotFoundError:
            return None
        return int(found.schema_id)

    def register(self, subject: str, text: str, schema_type: str = "AVRO") -> int:
        """Register ``text`` under ``subject`` (the registry's compatibility rules apply);
        its id.

        Raises
        ------
        RegistryError
            The registry refuses it (incompatible with the subject's versions, ...).
        """
        schema = Schema(text, schema_type)
        what = f"registering the given schema under subject {subject!r}"
        return int(self._call(what, lambda: self._client.register_schema(subject, schema)))

    def versions(self, subject: str) -> list[int]:
        """The versions of ``subject``, oldest first.

        Raises
        ------
        SchemaNotFoundError, RegistryError
        """
        what = f"the versions of subject {subject!r}"
        return sorted(self._call(what, lambda: self._client.get_versions(subject)))

    def avro(self, found: RegisteredSchema) -> AvroSchema:
        """``found`` as an Avro schema.

        Raises
        ------
        SchemaError
            It is not an Avro schema, or not a valid one.
        """
        schema = self.parsed(found, "AVRO")
        assert isinstance(schema, AvroSchema)
        return schema

    def parsed(self, found: RegisteredSchema, schema_type: str) -> Any:
        """``found`` as a schema of ``schema_type`` (the registry's name: ``AVRO``,
        ``PROTOBUF``, ``JSON``): an :class:`AvroSchema`, :class:`ProtobufSchema` or
        :class:`JsonSchema`.

        Raises
        ------
        SchemaError
            It is a schema of another type, or not a valid one.
        """
        where = f"schema id {found.schema_id}"
        if found.subject is not None:
            where += f" (subject {found.subject!r} version {found.version})"
        where += f" of the registry at {self.settings.shown_url}"
        if found.schema_type.upper() != schema_type:
            raise SchemaError(
                f"{where} is a {found.schema_type} schema, not {schema_type}: read it with "
                "the format of its type"
            )
        if schema_type == "AVRO":
            texts = tuple(text for _, text in found.references)
            return AvroSchema.parse(
                found.text, what=where, schema_id=found.schema_id, references=texts
            )
        parse = ProtobufSchema.parse if schema_type == "PROTOBUF" else JsonSchema.parse
        return parse(found.text, what=where, schema_id=found.schema_id, references=found.references)

    def _references(self, schema: Any, what: str) -> tuple[tuple[str, str], ...]:
        found_all: dict[str, str] = {}
        for reference in schema.references or ():
            inner = f"{what}'s reference {reference.name!r}"
            found = self._call(
                inner, lambda r=reference: self._client.get_version(r.subject, r.version)
            )
            for name, text in self._references(found.schema, inner):
                found_all.setdefault(name, text)
            found_all.setdefault(str(reference.name), str(found.schema.schema_str))
        return tuple(found_all.items())

    def _call(self, what: str, request: Any) -> Any:
        url = self.settings.shown_url
        try:
            return request()
        except SchemaRegistryError as exc:
            kind = _NOT_FOUND.get(exc.error_code)
            if kind is not None or exc.http_status_code == 404:
                raise SchemaNotFoundError(
                    f"the schema registry at {url} has no {what} ({exc.error_message}): check "
                    "the subject and version options, and that the application writes to "
                    "this registry"
                ) from None
            if exc.http_status_code in _AUTH_STATUSES:
                raise RegistryError(
                    f"the schema registry at {url} refused the credentials for {what} (HTTP "
                    f"{exc.http_status_code}: {exc.error_message}); check "
                    "schemaRegistry.basic.auth.user.info or schemaRegistry.bearer.auth.*"
                ) from None
            raise RegistryError(
                f"the schema registry at {url} failed to answer {what}: HTTP "
                f"{exc.http_status_code} error {exc.error_code}: {exc.error_message}"
            ) from None
        except (OSError, TransportError) as exc:  # TLS failures included
            raise RegistryError(
                f"cannot reach the schema registry at {url} for {what}: "
                f"{type(exc).__name__}: {exc}; check schemaRegistryUrl and "
                "schemaRegistry.ssl.*"
            ) from None


_registries: dict[tuple[str, tuple[tuple[str, str], ...]], SchemaRegistry] = {}
_lock = threading.Lock()


def registry_for(settings: RegistrySettings) -> SchemaRegistry:
    """This process's :class:`SchemaRegistry` for ``settings``."""
    key = (settings.url, tuple(sorted(settings.config.items())))
    with _lock:
        registry = _registries.get(key)
        if registry is None:
            registry = _registries[key] = SchemaRegistry(settings)
        return registry


def _without_credentials(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.username is None and parts.password is None:
        return url.strip()
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
