"""JSON Schema values, framed by a registry serializer or bare, decoded to one reader schema.

Registry serializers (Confluent's and Apicurio's JSON Schema serdes) write the frame of
:mod:`~spark_statestore.schemas.frame` and then the value as UTF-8 JSON text. Each value is
parsed strictly (one JSON value, UTF-8, no ``NaN``/``Infinity``, no duplicate keys, no lone
surrogates), validated against its own writer schema (found by the frame's schema id) by
``jsonschema``, the maintained validator, and read under the reader schema's column type
(:mod:`~spark_statestore.schemas.jsonschema_types`): properties by name, a property the
value lacks as the reader's ``default`` (else null), properties the reader lacks ignored. A
value that does not fit the reader's column (a string where it has an integer, an integer
beyond int64, an unparsable date) is an error naming its path; nothing is coerced.

Schemas use the draft their ``$schema`` names, draft-07 without one (as Confluent's
serializer). ``$ref`` resolves within the schema (``#/definitions/...``, ``#/$defs/...``)
and to the schemas it references in the registry, by ``referencing`` (the library
``jsonschema`` resolves with); nothing is fetched from the network. Formats are not
asserted when validating (the JSON Schema default); ``date`` and ``date-time`` columns
parse RFC 3339 strictly instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

import pyarrow as pa
from jsonschema import Draft7Validator
from jsonschema.exceptions import SchemaError as JsonSchemaError
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from referencing import Registry, Resource, Specification
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT7, UnknownDialect, specification_with

from spark_statestore.schemas.decoding import ValueDecoder, WriterCache
from spark_statestore.schemas.errors import (
    SchemaDecodeError,
    SchemaError,
    SchemaResolutionError,
    shorten,
)
from spark_statestore.schemas.frame import parse_frame
from spark_statestore.schemas.jsonschema_types import ColumnType, column_type_of
from spark_statestore.schemas.jsonschema_values import Converter, Misfit, converter_of
from spark_statestore.schemas.schema_text import SchemaText

if TYPE_CHECKING:  # referencing exports its Resolver for type hints only from there
    from referencing._core import Resolver

__all__ = ["STRICT_JSON", "JsonSchema", "JsonSchemaValueDecoder", "JsonSchemaWriterLookup"]

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


@dataclass(frozen=True)
class JsonSchema(SchemaText[tuple[str, str]]):
    """One JSON Schema: its text, the schemas it references, and where it came from for
    messages.

    Its ``references`` are the schemas it references (a registry's schema references):
    ``(name, text)``, the name as the registry names the reference and the ``$ref`` uses it
    (``"customer.json"``, ``"https://example.com/customer.json"``).

    Build it with :meth:`parse`. Picklable (it holds the texts; the parsed form is rebuilt
    where it is used).
    """

    _parsed: _Parsed | None = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(
        cls,
        text: str,
        *,
        what: str,
        schema_id: int | None = None,
        references: tuple[tuple[str, str], ...] = (),
    ) -> JsonSchema:
        """Parse and check ``text`` (with the schemas of ``references``).

        Raises
        ------
        SchemaError
            Not JSON, or not a valid schema of its draft (``jsonschema``'s reason), an
            unknown ``$schema``, a ``$ref`` that does not resolve, a recursive type, or a
            ``default`` its property's column cannot hold.
        """
        references = tuple((str(name), str(body)) for name, body in references)
        return cls(text, what, schema_id, references, _parse(text, what, references))

    @property
    def body(self) -> Any:
        """The schema document, as :func:`json.loads` returns it."""
        return self._state().body

    def column_type(self) -> ColumnType:
        """The column of its values (:mod:`~spark_statestore.schemas.jsonschema_types`)."""
        return self._state().column_type

    def arrow_type(self) -> pa.DataType:
        """The Arrow type of its values."""
        return self._state().column_type.arrow_type()

    def validator(self) -> Validator:
        """A ``jsonschema`` validator of its draft, resolving its ``$ref`` (formats are not
        asserted)."""
        return self._state().validator

    def _state(self) -> _Parsed:
        if self._parsed is None:
            object.__setattr__(self, "_parsed", _parse(self.text, self.what, self.references))
        assert self._parsed is not None
        return self._parsed


@dataclass(frozen=True)
class _Parsed:
    body: Any
    column_type: ColumnType
    convert: Converter
    validator: Validator


JsonSchemaWriterLookup = Callable[[int], JsonSchema]
"""The writer schema registered under an id (raises a RegistryError when it cannot)."""


class JsonSchemaValueDecoder(ValueDecoder):
    """Decodes batches of stored bytes written as JSON Schema values to the reader schema.

    Parameters
    ----------
    reader
        The reader schema: every value is read as its column type.
    writers
        The writer schema of a frame's schema id (a registry lookup, cached here per id;
        every id is looked up, validating or not); None for bare JSON (no frame), written
        with ``reader`` itself.
    subject
        The registry subject, named in messages (None without a registry).
    column
        ``"key"`` or ``"value"``, named in messages.
    validate
        Validate each value against its writer schema (``reader`` for bare JSON) first; a
        value its writer schema refuses is a bad value.
    """

    def __init__(
        self,
        reader: JsonSchema,
        writers: JsonSchemaWriterLookup | None,
        *,
        subject: str | None = None,
        column: str = "value",
        validate: bool = True,
    ) -> None:
        self.reader = reader
        self.subject = subject
        self.column = column
        self.validate = validate
        self._writers = WriterCache(writers) if writers is not None else None
        state = reader._state()
        self._convert = state.convert
        self._bare_validator = state.validator if validate else None
        self.arrow_type = state.column_type.arrow_type()

    def decode_one(self, raw: bytes) -> Any:
        """One value, as :func:`pyarrow.array` takes it.

        Raises
        ------
        FrameError, SchemaDecodeError, SchemaResolutionError, RegistryError
        """
        value, schema_id = self._read(raw)
        try:
            return self._convert(value)
        except Misfit as misfit:
            where = misfit.where()
            source = "the value"
            if schema_id is not None:
                source = f"the value read with {self._which(schema_id)}"
            reader_id = self.reader.schema_id
            reader = f", schema id {reader_id}" if reader_id is not None else ""
            raise SchemaResolutionError(
                f"{source} does not fit the reader schema ({self.reader.what}{reader}) at "
                f"{where}: {misfit.reason}. Read it with a reader schema whose type at {where} "
                "is what the writer writes ({} reads any value as JSON text), or evolve the "
                "schema compatibly (add optional properties, keep each property's type)"
            ) from None
        except RecursionError:
            raise SchemaDecodeError(
                f"the value read with {self._which(schema_id)} is nested too deeply to read"
            ) from None

    def read(self, raw: bytes) -> Any:
        """One value as JSON (:func:`json.loads`'s), validated against its writer schema
        when ``validate``.

        Raises
        ------
        FrameError, SchemaDecodeError, RegistryError
        """
        return self._read(raw)[0]

    def _read(self, raw: bytes) -> tuple[Any, int | None]:
        if self._writers is None:
            schema_id, offset, validator = None, 0, self._bare_validator
        else:
            frame = parse_frame(raw)
            schema_id, offset = frame.schema_id, frame.payload_offset
            writer = self._writers(schema_id)  # looked up validating or not
            validator = writer.validator() if self.validate else None
        value = _load(raw, offset, self._which(schema_id))
        if validator is not None:
            self._check(validator, value, schema_id)
        return value, schema_id

    def _check(self, validator: Validator, value: Any, schema_id: int | None) -> None:
        try:
            if validator.is_valid(value):
                return
            error = best_match(validator.iter_errors(value))
        except RecursionError:
            raise SchemaDecodeError(
                f"the value is nested too deeply to validate against {self._which(schema_id)}"
            ) from None
        raise SchemaDecodeError(
            f"the value does not validate against {self._which(schema_id)} at "
            f"{error.json_path}: {shorten(error.message)}. Its producer wrote a value its own "
            "schema refuses (a serializer with validation off?): fix the producer, or decode "
            "without validation to read it as far as the reader schema's types allow"
        )

    def _which(self, schema_id: int | None) -> str:
        if schema_id is None:
            return self.reader.what
        subject = f" (subject {self.subject})" if self.subject else ""
        return f"writer schema id {schema_id}{subject}"


# -- the payload --------------------------------------------------------------------------
class _NotJson(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON number")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _NotJson(f"the key {key!r:.60} appears twice in an object")
            seen.add(key)
    return value


STRICT_JSON = json.JSONDecoder(parse_constant=_refuse_constant, object_pairs_hook=_object)
"""JSON as the registry serializers write it: no NaN or Infinity, no key twice in an object
(either raises a ValueError naming it)."""


def _load(raw: bytes, offset: int, which: str) -> Any:
    """The one JSON value of the payload, strictly."""
    size = len(raw) - offset
    try:
        text = raw[offset:].decode("utf-8")
    except UnicodeDecodeError as exc:
        reason = f"{exc.reason} at payload byte {exc.start}"
    else:
        try:
            value = STRICT_JSON.decode(text)
            if _SURROGATE_ESCAPE.search(text):  # a lone \ud800 is no Unicode text (nor Arrow's)
                json.dumps(value, ensure_ascii=False).encode("utf-8")
            return value
        except UnicodeEncodeError:
            reason = "a \\u escape stands for a lone surrogate, which is no Unicode text"
        except RecursionError:
            reason = "nested too deeply"
        except ValueError as exc:  # JSONDecodeError, _NotJson, too many digits
            reason = shorten(str(exc))
    raise SchemaDecodeError(
        f"the {size}-byte payload read with {which} is not one JSON value in UTF-8: {reason}. "
        "JSON Schema serializers write one JSON value (no NaN or Infinity, no duplicate "
        "keys); read the value with format binary to see what wrote it"
    )


# -- schemas ------------------------------------------------------------------------------
def _parse(text: str, what: str, references: tuple[tuple[str, str], ...]) -> _Parsed:
    try:
        return _parse_checked(text, what, references)
    except RecursionError:
        raise SchemaError(f"{what} is nested too deeply to read as a JSON Schema") from None


def _parse_checked(text: str, what: str, references: tuple[tuple[str, str], ...]) -> _Parsed:
    body, validator_class, specification = _load_schema(text, what)
    resources: dict[str, Resource[Any]] = {}
    for name, ref_text in references:
        ref_what = f"{what}, reference {name!r}"
        if name in resources:
            raise SchemaError(f"{what} names reference {name!r} twice: give each once")
        ref_body, _, ref_specification = _load_schema(ref_text, ref_what)
        resources[name] = ref_specification.create_resource(ref_body)
    root = specification.create_resource(body)
    entries = dict(resources)
    for name, resource in resources.items():  # as a $ref may name it: by its $id, or
        entries.setdefault(resource.id() or name, resource)  # relative to the root's $id
        entries.setdefault(urljoin(root.id() or "", name), resource)
    registry: Registry[Any] = Registry().with_resources(entries.items())
    resolver = registry.resolver_with_root(root)
    try:
        column_type = column_type_of(body, registry, specification)
    except SchemaError as exc:
        raise SchemaError(f"{what}: {exc}") from None
    _check_refs(root, resolver, what)  # those no column follows (under not, if, ...) too
    for name, resource in resources.items():
        _check_refs(resource, registry.resolver(name), f"{what}, reference {name!r}")
    try:
        convert = converter_of(column_type)
    except Misfit as misfit:
        raise SchemaError(
            f"{what}: the default of {misfit.where()} does not fit its column: "
            f"{misfit.reason}. Give a default of the property's type, or none"
        ) from None
    return _Parsed(body, column_type, convert, validator_class(body, registry=registry))


def _load_schema(text: str, what: str) -> tuple[Any, type[Validator], Specification[Any]]:
    """The document of a schema text, its draft's validator class and specification, the
    document checked against the draft's meta-schema."""
    try:
        body = STRICT_JSON.decode(text)
    except ValueError as exc:
        raise SchemaError(f"{what} is not a JSON Schema: not JSON ({exc})") from None
    if isinstance(body, bool):
        return body, Draft7Validator, DRAFT7
    if not isinstance(body, dict):
        raise SchemaError(
            f"{what} is not a JSON Schema: a schema is an object or a boolean, not "
            f"{type(body).__name__}"
        )
    dialect = body.get("$schema")
    if dialect is None:
        validator_class: type[Validator] = Draft7Validator
        specification = DRAFT7
    else:
        try:
            specification = specification_with(str(dialect))
        except UnknownDialect:
            raise SchemaError(
                f"{what}: $schema {dialect!r} is no JSON Schema draft jsonschema knows "
                "(draft-03 to 2020-12); name one of those, or leave $schema out (draft-07)"
            ) from None
        validator_class = validator_for(body, default=Draft7Validator)
    try:
        validator_class.check_schema(body)
    except JsonSchemaError as exc:
        raise SchemaError(
            f"{what} is not a valid JSON Schema ({specification.name}) at {exc.json_path}: "
            f"{shorten(exc.message)}"
        ) from None
    return body, validator_class, specification


def _check_refs(resource: Resource[Any], resolver: Resolver[Any], what: str) -> None:
    """Every ``$ref`` in ``resource`` resolves (the column type follows only some; the
    validator would fail on the others at the first value that reaches them)."""
    todo = [(resource, resolver)]
    while todo:
        current, current_resolver = todo.pop()
        ref = current.contents.get("$ref") if isinstance(current.contents, dict) else None
        if isinstance(ref, str):
            try:
                current_resolver.lookup(ref)
            except Unresolvable as exc:
                raise SchemaError(
                    f"{what}: $ref {ref!r} does not resolve ({type(exc).__name__}): define it "
                    "under #/definitions (or #/$defs), or give the schema it names as a "
                    "reference (a registry's schema reference, named as the $ref names it)"
                ) from None
        for sub in current.subresources():
            todo.append((sub, current_resolver.in_subresource(sub)))
