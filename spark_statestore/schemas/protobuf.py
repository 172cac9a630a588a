"""Protobuf values, framed by a registry serializer or bare, decoded to one reader message.

A schema is compiled by protoc itself (the one grpcio-tools bundles, with the well-known
types' .proto files, so ``import "google/protobuf/timestamp.proto"`` needs no reference) into
descriptors of the maintained protobuf library, in a descriptor pool of its own. Each distinct
schema (its text and references) is compiled once per process.

Values are parsed by the protobuf library with the reader message's class: Protobuf's own
evolution rules then apply (a field the reader does not know is skipped, one the writer did
not write is unset). What the library would read as garbage is refused first, once per
writer schema id and message indexes: the writer's message must be wire-compatible with the
reader's field by field (:func:`~spark_statestore.schemas.protobuf_types.first_incompatibility`),
and the frame's message indexes must name a message of the writer schema. The values then
become rows of :func:`~spark_statestore.schemas.protobuf_types.arrow_type_of` the reader
message.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FileDescriptor
from google.protobuf.message import DecodeError, Message

from spark_statestore.errors import closest_hint
from spark_statestore.schemas.decoding import ValueDecoder, WriterCache, writer_named
from spark_statestore.schemas.errors import (
    SchemaDecodeError,
    SchemaError,
    SchemaResolutionError,
)
from spark_statestore.schemas.frame import parse_message_indexes
from spark_statestore.schemas.protobuf_types import (
    WIRE_COMPATIBLE,
    RowConverter,
    arrow_type_of,
    first_incompatibility,
    row_converter,
)
from spark_statestore.schemas.schema_text import SchemaText

__all__ = ["ProtobufSchema", "ProtobufValueDecoder", "ProtobufWriterLookup"]

References = tuple[tuple[str, str], ...]
"""(import name, .proto text) of the files a schema imports, each before its importers."""

_MAIN_FILE = "schema.proto"
_PROTOC_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class ProtobufSchema(SchemaText[tuple[str, str]]):
    """One Protobuf schema (a .proto file's text), and where it came from for messages.

    Its ``references`` are the files it imports, as a registry gives its schema references:
    (import name, .proto text), each before those that import it. The well-known types
    (``google/protobuf/*.proto``) need none.

    Build it with :meth:`parse`. Picklable (it holds the text; the compiled form is rebuilt
    where it is used, once per process).
    """

    _compiled: _Compiled | None = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(
        cls,
        text: str,
        *,
        what: str,
        schema_id: int | None = None,
        references: References = (),
    ) -> ProtobufSchema:
        """Compile ``text`` (with its ``references``) now.

        Raises
        ------
        SchemaError
            Not a valid .proto file (protoc's own messages, ``schema.proto:3:14: ...``), a
            reference with an unusable name, or protoc cannot be run.
        """
        return cls(text, what, schema_id, references, _compile(text, references, what))

    @property
    def file(self) -> FileDescriptor:
        """The compiled file (in a descriptor pool of its own, holding its imports)."""
        return self._form().file

    @property
    def messages(self) -> tuple[str, ...]:
        """The full names of its top-level messages, in declaration order."""
        return tuple(message.full_name for message in self._form().messages)

    def message(self, full_name: str | None = None) -> Descriptor:
        """The message type ``full_name`` (``shop.Order``, ``shop.Order.Line``), of this
        file or of one it imports; None: the file's first message.

        Raises
        ------
        SchemaError
            No such message.
        """
        form = self._form()
        if full_name is None:
            if not form.messages:
                raise SchemaError(f"{self.what} defines no message: there is nothing to read")
            return form.messages[0]
        try:
            return form.file.pool.FindMessageTypeByName(full_name.removeprefix("."))
        except KeyError:
            hint = closest_hint(full_name, _all_names(form.messages), noun="messages")
            raise SchemaError(f"{self.what} defines no message {full_name!r}{hint}") from None

    def message_for(self, indexes: Sequence[int]) -> Descriptor:
        """The message type at Confluent's message ``indexes``: ``[0]`` is the first
        top-level message, ``[1, 0]`` the first message nested in the second one.

        Raises
        ------
        SchemaDecodeError
            The indexes name no message: the value was written with another schema.
        """
        choices: Sequence[Descriptor] = self._form().messages
        where = "the file"
        found: Descriptor | None = None
        for index in indexes:
            if not 0 <= index < len(choices):
                names = ", ".join(m.full_name for m in choices) or "none"
                raise SchemaDecodeError(
                    f"message indexes {list(indexes)} name no message of {self._named()}: "
                    f"{where} has {len(choices)} message(s) ({names}); the value was written "
                    "with another schema, or is not Protobuf"
                )
            found = choices[index]
            choices, where = found.nested_types, f"message {found.full_name}"
        if found is None:
            raise SchemaDecodeError(f"empty message indexes name no message of {self._named()}")
        return found

    def arrow_type(self, message_full_name: str | None = None) -> pa.DataType:
        """The Arrow type of values of a message (None: the first;
        :mod:`~spark_statestore.schemas.protobuf_types`).

        Raises
        ------
        SchemaError
            No such message, or a recursive message type.
        """
        message = self.message(message_full_name)
        form = self._form()
        found = form.arrow_types.get(message.full_name)
        if found is None:
            try:
                found = arrow_type_of(message)
            except SchemaError as exc:
                raise SchemaError(f"{self.what}: {exc}") from None
            form.arrow_types[message.full_name] = found
        return found

    def row_converter(self, message_full_name: str | None = None) -> RowConverter:
        """The function from a parsed message to its row (built once per process).

        Raises
        ------
        SchemaError
            As :meth:`arrow_type`.
        """
        message = self.message(message_full_name)
        self.arrow_type(message.full_name)  # refuses recursive types with the schema named
        form = self._form()
        found = form.converters.get(message.full_name)
        if found is None:
            found = form.converters.setdefault(message.full_name, row_converter(message))
        return found

    def _form(self) -> _Compiled:
        if self._compiled is None:
            compiled = _compile(self.text, self.references, self.what)
            object.__setattr__(self, "_compiled", compiled)
            return compiled
        return self._compiled

    def _named(self) -> str:
        if self.schema_id is None or f"schema id {self.schema_id}" in self.what:
            return self.what
        return f"schema id {self.schema_id} ({self.what})"


ProtobufWriterLookup = Callable[[int], ProtobufSchema]
"""The writer schema registered under an id (raises a RegistryError when it cannot)."""


class ProtobufValueDecoder(ValueDecoder):
    """Decodes batches of stored bytes written with Protobuf to the reader message.

    Parameters
    ----------
    reader
        The reader schema.
    writers
        The writer schema of a frame's schema id (a registry lookup, cached here); None
        for bare Protobuf (no frame), written with the reader message.
    message
        The reader message's full name (``shop.Order``); None: the reader's first message.
    subject
        The registry subject, named in messages (None without a registry).
    column
        ``"key"`` or ``"value"``, named in messages.

    Raises
    ------
    SchemaError
        No such message in ``reader``, or a recursive message type.
    """

    def __init__(
        self,
        reader: ProtobufSchema,
        writers: ProtobufWriterLookup | None,
        *,
        message: str | None = None,
        subject: str | None = None,
        column: str = "value",
    ) -> None:
        self.reader = reader
        self.subject = subject
        self.column = column
        self.message = reader.message(message)
        """The reader message's descriptor: every value is parsed as it."""
        self.arrow_type = reader.arrow_type(self.message.full_name)
        self._convert = reader.row_converter(self.message.full_name)
        self._class = message_factory.GetMessageClass(self.message)
        self._writers = WriterCache(writers) if writers is not None else None
        self._problems: dict[tuple[int, tuple[int, ...]], str | None] = {}

    def decode_one(self, raw: bytes) -> Any:
        """One value, as :func:`pyarrow.array` takes it.

        Raises
        ------
        FrameError, SchemaDecodeError, SchemaResolutionError, RegistryError
        """
        value, schema_id = self._parse(raw)
        try:
            return self._convert(value)
        except SchemaDecodeError as exc:
            raise SchemaDecodeError(f"read with {self._which(schema_id)}: {exc}") from None

    def read(self, raw: bytes) -> Message:
        """One value as a message of the reader's class.

        Raises
        ------
        FrameError, SchemaDecodeError, SchemaResolutionError, RegistryError
        """
        return self._parse(raw)[0]

    def _parse(self, raw: bytes) -> tuple[Message, int | None]:
        if self._writers is None:
            offset, schema_id = 0, None
        else:
            frame = parse_message_indexes(raw)
            offset, schema_id = frame.payload_offset, frame.schema_id
            self._resolve(schema_id, frame.message_indexes or (0,))
        value = self._class()
        try:
            value.ParseFromString(raw[offset:])
        except DecodeError as exc:
            raise SchemaDecodeError(
                f"{len(raw) - offset} payload byte(s) do not parse as message "
                f"{self.message.full_name} of {self._which(schema_id)}: {exc}"
            ) from None
        return value, schema_id

    def _resolve(self, schema_id: int, indexes: tuple[int, ...]) -> None:
        """Refuses a writer message the reader's cannot parse (checked once per id and
        message indexes; a registry error or bad indexes are not remembered)."""
        key = (schema_id, indexes)
        if key not in self._problems:
            assert self._writers is not None
            written = self._writers(schema_id).message_for(indexes)
            problem = first_incompatibility(written, self.message)
            if problem is not None:
                problem = (
                    f"{self._which(schema_id)}, message {written.full_name} at indexes "
                    f"{list(indexes)}, cannot be read as message {self.message.full_name} of "
                    f"the reader schema ({self.reader.what}): {problem}. Protobuf's rules "
                    "allow adding and removing fields and changing a field's type within "
                    f"{_GROUPS}; read with the writer's schema version, or evolve the schema "
                    "by those rules"
                )
            self._problems[key] = problem
        problem = self._problems[key]
        if problem is not None:
            raise SchemaResolutionError(problem)

    def _which(self, schema_id: int | None) -> str:
        return writer_named(schema_id, self.reader, self.subject)


_GROUPS = ", ".join(
    "{" + ", ".join(sorted(names)) + "}" for names in WIRE_COMPATIBLE if len(names) > 1
)


# -- compiling with protoc ----------------------------------------------------------------
class _Compiled:
    """A compiled schema, shared by every :class:`ProtobufSchema` of its text in a process;
    the Arrow types and row converters of its messages are built once, when first asked."""

    def __init__(self, file: FileDescriptor, messages: tuple[Descriptor, ...]) -> None:
        self.file = file
        self.messages = messages
        self.arrow_types: dict[str, pa.DataType] = {}
        self.converters: dict[str, RowConverter] = {}


_COMPILED: dict[tuple[str, References], _Compiled] = {}
_COMPILED_LOCK = threading.Lock()


def _compile(text: str, references: References, what: str) -> _Compiled:
    key = (text, references)
    with _COMPILED_LOCK:
        found = _COMPILED.get(key)
    if found is None:
        found = _load(*_protoc(text, references, what), what)
        with _COMPILED_LOCK:
            found = _COMPILED.setdefault(key, found)
    return found


def _protoc(text: str, references: References, what: str) -> tuple[bytes, str]:
    """The FileDescriptorSet protoc makes of ``text`` and its imports, and the name
    ``text`` was compiled under."""
    names = [name for name, _ in references]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise SchemaError(f"{what}: references {duplicates} are given more than once")
    main = next(_free_names(set(names)))
    with tempfile.TemporaryDirectory(prefix="spark-statestore-proto-") as work:
        root = Path(work) / "src"
        for name, body in (*references, (main, text)):
            path = root.joinpath(*_relative(name, what).parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                path.write_text(body, encoding="utf-8")
            except UnicodeEncodeError as exc:  # a lone surrogate, from JSON text
                raise SchemaError(f"{what}: {name} is not Unicode text ({exc})") from None
        out = Path(work) / "schema.pb"
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "--proto_path=.",  # relative, so that protoc's messages name schema.proto
            f"--proto_path={_well_known_types(what)}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            main,
        ]
        try:
            done = subprocess.run(
                command,
                cwd=root,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=_PROTOC_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise SchemaError(f"{what}: protoc (grpcio-tools) cannot be run: {exc}") from None
        if done.returncode != 0:
            said = " ".join(line.strip() for line in done.stderr.splitlines() if line.strip())
            raise SchemaError(
                f"{what} is not a valid .proto file (compiled as {main}): protoc says: "
                f"{said or f'exit code {done.returncode}.'} Fix the schema text, or give the "
                "files it imports (other than the well-known types) as references"
            )
        return out.read_bytes(), main


def _load(serialized: bytes, main_name: str, what: str) -> _Compiled:
    files = descriptor_pb2.FileDescriptorSet.FromString(serialized)
    pool = descriptor_pool.DescriptorPool()
    try:
        for proto in files.file:  # protoc lists every file after those it imports
            pool.Add(proto)
    except (TypeError, ValueError, KeyError) as exc:
        raise SchemaError(f"{what}: its descriptors do not load: {exc}") from None
    main = next(proto for proto in files.file if proto.name == main_name)
    package = f"{main.package}." if main.package else ""
    file = pool.FindFileByName(main.name)
    messages = tuple(pool.FindMessageTypeByName(package + m.name) for m in main.message_type)
    return _Compiled(file, messages)


def _free_names(taken: set[str]) -> Iterator[str]:
    yield from (
        name
        for name in (_MAIN_FILE, *(f"schema-{n}.proto" for n in range(1, len(taken) + 2)))
        if name not in taken
    )


def _relative(name: str, what: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name:
        raise SchemaError(
            f"{what}: reference name {name!r} is not a relative import path (such as "
            "'shop/line.proto')"
        )
    return path


def _well_known_types(what: str) -> str:
    spec = importlib.util.find_spec("grpc_tools")
    if spec is None or not spec.submodule_search_locations:
        raise SchemaError(
            f"{what}: Protobuf schemas are compiled with the protoc of grpcio-tools, which is "
            "not installed: pip install grpcio-tools"
        )
    return str(Path(next(iter(spec.submodule_search_locations))) / "_proto")


def _all_names(messages: Sequence[Descriptor]) -> list[str]:
    """Full names of ``messages`` and those nested in them (map entries left out)."""
    names: list[str] = []
    for message in messages:
        if not message.GetOptions().map_entry:
            names.append(message.full_name)
            names += _all_names(message.nested_types)
    return names
