"""Every parser of untrusted input, fuzzed: a valid result or one of our errors, never a crash.

Inputs are valid encodings mutated the way broken writers, truncated transfers and hostile
peers mutate them: cut short, bytes or characters overwritten, pieces of the format inserted,
slices deleted or repeated, inputs spliced, and nested thousands of levels deep. "Our errors"
are :class:`~spark_statestore.errors.StateStoreError` and its subclasses; anything else (a
``struct.error``, ``RecursionError``, ``ValueError`` from ``int()``...) fails the test, naming
the input and how to replay it. Where a parser has a reference (the position header decoder
for the follower's bulk merger), both must agree on every input.

CI runs a slice of a few thousand inputs per parser; ``make soak`` (``SPARK_STATESTORE_SOAK=1``)
runs :data:`SOAK_INPUTS` inputs per parser, over a million in all.
"""

from __future__ import annotations

import decimal
import functools
import json
import random
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
import pytest

from spark_statestore.changelog.errors import ChangelogFormatError
from spark_statestore.changelog.keys import (
    decode_session_key,
    decode_window_key,
    encode_session_key,
    encode_window_key,
)
from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.changelog.position_codec import decode_position, encode_position
from spark_statestore.connectors.spark.checkpoint_fs import CheckpointLocation, FilesystemSettings
from spark_statestore.connectors.spark.checkpoint_fs.filesystems import check_readable
from spark_statestore.connectors.spark.ddl import parse_ddl, to_ddl
from spark_statestore.connectors.spark.errors import DecodeError
from spark_statestore.connectors.spark.formats import ColumnCodec
from spark_statestore.connectors.spark.leader.server import batch_from_json, batch_to_json
from spark_statestore.connectors.spark.options import (
    parse_reader_options,
    parse_sink_options,
    parse_source_options,
)
from spark_statestore.discovery import ReplicaAnnouncement
from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import (
    FailureReason,
    KeyQuery,
    LagInfo,
    MultiVersionedKeyQuery,
    PrefixQuery,
    QueryResult,
    RangeQuery,
    RawKeyQuery,
    RawScanQuery,
    StateQueryRequest,
    StateQueryResult,
    VersionedKeyQuery,
    VersionedRecord,
)
from spark_statestore.schemas import (
    AvroSchema,
    AvroValueDecoder,
    JsonSchema,
    JsonSchemaValueDecoder,
    ProtobufSchema,
    ProtobufValueDecoder,
    SchemaError,
    ValueDecoder,
    encode_frame,
    parse_frame,
    parse_message_indexes,
)
from spark_statestore.serve.key_wire import (
    decode_key_query,
    decode_key_reply,
    encode_key_query,
    encode_key_reply,
    travels_compact,
)
from spark_statestore.serve.protocol import (
    DescribeReply,
    ScanTicket,
    StoreDescription,
    decode_error_info,
    decode_object,
    lags_from_dict,
)
from spark_statestore.serve.query_wire import (
    decode_query_body,
    decode_result,
    encode_query_body,
    encode_result,
)
from spark_statestore.sink.commit import BatchToCommit
from spark_statestore.sink.staging import StagedFile
from spark_statestore.store.manifest import Role
from spark_statestore.store.scan import ScanSpec
from tests.unit.test_changelog_headers import _fuzz_corpus
from tests.unit.test_discovery import make_announcement
from tests.unit.test_position_merger import merge_outcomes
from tests.unit.test_schemas_avro import lookup_of
from tests.unit.test_serve_protocol import OWNER_DICT, valid_description

T = TypeVar("T", str, bytes)

CI_INPUTS = 3_000
"""Inputs per parser in CI (the whole file stays well under 20 s)."""
SOAK_INPUTS = 200_000
"""Inputs per parser in ``make soak``: over a million over the parsers below."""


# -- mutations ------------------------------------------------------------------------------
_NESTS = (1, 2, 3, 50, 499, 500, 501, 999, 1_000, 5_000)


def mutate(
    rng: random.Random,
    data: T,
    pieces: Sequence[T],
    corpus: Sequence[T],
    nest: tuple[T, T] | None = None,
) -> T:
    """``data`` with one to three structure-aware mutations.

    ``pieces`` are fragments of the format (tokens, interesting numbers); ``corpus`` are
    other valid inputs to splice in; ``nest`` is an opening and a closing fragment that
    nest (``("[", "]")``, ``("ARRAY<", ">")``).
    """
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        size = len(data)
        at = rng.randrange(size + 1)
        operation = rng.randrange(9)
        if operation == 0:  # cut short, often within the first fields
            data = data[: rng.choice((at, rng.randrange(min(size, 12) + 1)))]
        elif operation == 1 and size:  # one element overwritten
            index = rng.randrange(size)
            data = data[:index] + rng.choice(pieces)[:1] + data[index + 1 :]
        elif operation == 2:  # a fragment of the format inserted
            data = data[:at] + rng.choice(pieces) + data[at:]
        elif operation == 3 and size:  # a slice deleted
            data = data[:at] + data[at + rng.randrange(1, 9) :]
        elif operation == 4 and size:  # a slice repeated somewhere
            start = rng.randrange(size)
            piece = data[start : start + rng.randrange(1, 17)]
            data = data[:at] + piece * rng.randrange(1, 4) + data[at:]
        elif operation == 5:  # spliced with another input
            other = rng.choice(corpus)
            data = data[:at] + other[rng.randrange(len(other) + 1) :]
        elif operation == 6 and nest is not None:  # nested deep: around a slice, or unclosed
            opening, closing = nest
            depth = rng.choice(_NESTS) if rng.random() < 0.5 else rng.randrange(1, 1_200)
            end = rng.choice((size, at, min(size, at + rng.randrange(1, 9))))
            if rng.random() < 0.8:
                data = data[:at] + opening * depth + data[at:end] + closing * depth + data[end:]
            else:
                data = data[:at] + opening * depth + data[at:]
        elif operation == 7:  # a piece of the format overwriting what was there
            piece = rng.choice(pieces)
            data = data[:at] + piece + data[at + len(piece) :]
        else:  # extended with its own beginning
            data = data + data[: rng.randrange(size + 1)]
    return data


def _int_pieces() -> list[bytes]:
    numbers = [0, 1, 2, 5, 127, 128, 255, 2**31 - 1, -1, -(2**31), 2**63 - 1, -(2**63)]
    pieces = [struct.pack(">i", n) for n in numbers if -(2**31) <= n < 2**31]
    pieces += [struct.pack(">q", n) for n in numbers]
    return pieces + [bytes([b]) for b in (0, 1, 0x7F, 0x80, 0xFF, ord('"'), ord("["))]


_BYTE_PIECES = _int_pieces()
# Characters that break naive parsers: other scripts' digits, a superscript, NUL, a lone
# surrogate, a non-BMP character, blanks.
_ODD_CHARACTERS = ["\u0663", "\uff13", "\u00b2", "\x00", "\ud800", "\U0001f600", " ", "\t", "\n"]
_TEXT_NUMBERS = ["0", "-1", "-2", "2147483648", "9223372036854775808", "9" * 40, "1e400", "1.5"]


# -- the targets ----------------------------------------------------------------------------
class Refused(StateStoreError):
    """Every decoder of a target that runs several refused the input (counted as refused)."""


@dataclass(frozen=True)
class Target:
    """One parser: how to make an input, and what to do with it.

    ``parse`` raises a :class:`StateStoreError` for an input it refuses, returns for one it
    accepts (checking what it returned), and raises anything else for a bug.
    """

    name: str
    generate: Callable[[random.Random], Any]
    parse: Callable[[Any], None]


# Position headers: the follower's bulk merger agrees with the reference decoder.
_ONE_TOPIC = Position.from_map({"orders": {3: 41}})  # the follower's fast path
_HEADER_CORPUS = [
    *_fuzz_corpus(),
    encode_position(_ONE_TOPIC),
    encode_position(_ONE_TOPIC, pad_like_kafka_streams=True),
]
_VERSIONS = [b"\x00", b"\x00", b"\x00", b"\x01", b"", None, b"\x00\x07"]


def _header_records(rng: random.Random) -> list[list[tuple[str, bytes | None]] | None]:
    records: list[list[tuple[str, bytes | None]] | None] = []
    for _ in range(rng.randrange(1, 5)):
        value = mutate(rng, rng.choice(_HEADER_CORPUS), _BYTE_PIECES, _HEADER_CORPUS)
        shape = rng.randrange(6)
        if shape == 0:
            records.append(None)
        elif shape < 4:  # what Kafka Streams writes
            records.append([("v", rng.choice(_VERSIONS)), ("c", value)])
        else:
            keys = rng.choices(["v", "c", "other"], k=rng.randrange(5))
            records.append([(k, rng.choice(_VERSIONS) if k == "v" else value) for k in keys])
    return records


def _parse_headers(records: list[list[tuple[str, bytes | None]] | None]) -> None:
    for on_missing in (OnMissingPosition.SKIP, OnMissingPosition.FAIL):  # strict mode last
        reference, bulk, single = merge_outcomes(records, on_missing)
        assert bulk == reference, f"add_all: {bulk} but the reference decoder: {reference}"
        assert single == reference, f"add: {single} but the reference decoder: {reference}"
    for headers in records:
        for key, value in headers or ():
            if key != "c":
                continue
            try:
                position = decode_position(value)
            except ChangelogFormatError:
                continue
            assert decode_position(encode_position(position)) == position
    if isinstance(reference[0], type):  # strict mode's (error type, reason, location)
        raise Refused(f"{reference[0].__name__}: {reference[1]}")


# Window and session store keys.
def _key_corpus() -> list[bytes]:
    keys = [b"", b"k", b"order-\xff", bytes(40)]
    corpus = [encode_window_key(k, s, q) for k in keys for s, q in ((0, 0), (2**63 - 1, -1))]
    corpus += [encode_session_key(k, 0, 2**40) for k in keys]
    return corpus


_KEY_CORPUS = _key_corpus()


def _parse_keys(data: bytes) -> None:
    refused = 0
    for decode in (decode_window_key, decode_session_key):
        try:
            key = decode(data)
        except ChangelogFormatError:
            refused += 1
            continue
        assert key.encode() == data, f"{key} encodes to other bytes"
    if refused == 2:
        raise Refused("neither a window nor a session key")


# Spark DDL (valueSchema / keySchema).
_DDL_CORPUS = [
    "id INT, name STRING NOT NULL COMMENT 'full name', tags ARRAY<STRING>, price DECIMAL(10,2)",
    "STRUCT<a: MAP<STRING, ARRAY<STRUCT<b: BIGINT, `c d`: TIMESTAMP>>>, e BINARY>",
    "`we``ird` VARCHAR(20), d DATE, t TIMESTAMP_NTZ, f DOUBLE, b BOOLEAN, s SMALLINT",
    'x STRUCT<>, y MAP<STRING, MAP<STRING, DECIMAL(38,38)>> COMMENT "a\\u0041\\n"',
]
_DDL_PIECES = [
    "ARRAY<", "MAP<", "STRUCT<", "<", ">", ",", ":", "(", ")", "`", "``", "'", '"', "\\",
    " NOT NULL", " COMMENT 'x'", "DECIMAL(", "38", "39", "0", "INT", "STRING", "x", " ",
    *_ODD_CHARACTERS, *_TEXT_NUMBERS,
]  # fmt: skip


def _parse_ddl(text: str) -> None:
    schema = parse_ddl(text, option="valueSchema")
    assert parse_ddl(to_ddl(schema)) == schema, f"{to_ddl(schema)!r} parses to another schema"
    ColumnCodec.create("json", schema, column="value")  # OptionError for MAP<INT, ...>


# JSON values (valueFormat json), in both modes.
_JSON_CODECS = [
    ColumnCodec.create("json", parse_ddl(schema), column="value")
    for schema in (
        "id BIGINT, name STRING, tags ARRAY<STRING>, price DECIMAL(10,2), at TIMESTAMP",
        "s STRING, m MAP<STRING, ARRAY<INT>>, n STRUCT<d: DATE, b: BINARY, f: DOUBLE>",
    )
]
_JSON_CORPUS = [
    b'{"id": 7, "name": "pen", "tags": ["a", null], "price": 12.5, "at": "2024-05-31T12:00Z"}',
    b'{"s": {"x": [1, "y"]}, "m": {"k": [1, 2]}, "n": {"d": "2024-05-31", "b": "AAE=", '
    b'"f": "NaN"}}',
    b'{"id": -9223372036854775808, "price": "1,234.5", "at": 1717156800, "tags": []}',
    b'"\\ud800\\"[{"',
    b"[[[[1]]]]",
    b'{"s": 1, "tags": ["x"], "m": {"k": []}}',
]
_JSON_PIECES = [
    b"{", b"}", b"[", b"]", b'"', b"\\", b":", b",", b"null", b"true", b"1e400", b"-0",
    b"NaN", b"Infinity", b'"\\u0000"', b'"\\ud800"', b"\xff", b"\xc3", b" ",
    *(c.encode("utf-8", "surrogatepass") for c in _ODD_CHARACTERS),
]  # fmt: skip


def _locate(index: int) -> str:
    return f"topic fuzz partition 0 offset {index}"


def _parse_json(values: list[bytes | None]) -> None:
    for codec in _JSON_CODECS:
        try:
            _, bad = codec.decode(values, locate=_locate, permissive=True)
        except StateStoreError as exc:
            raise AssertionError(f"PERMISSIVE raised {exc!r}") from exc
        try:
            codec.decode(values, locate=_locate, permissive=False)
        except DecodeError as exc:
            assert bad and values[exc.index] is not None, "FAILFAST refused what PERMISSIVE took"
            raise
        assert bad == 0, "FAILFAST took what PERMISSIVE counted as undecodable"


_JSON_FIELDS = [b"s", b"s", b"m", b"n", b"id", b"tags", b"price", b"at"]
_JSON_LEAVES = [b"1", b'"x"', b"null", b"[]", b"{}", b"-1.5e3", b'"2024-05-31"', b"true"]


def _json_document(rng: random.Random) -> bytes:
    """A valid JSON object whose fields hold values nested up to 1,200 levels deep."""
    fields = []
    for name in dict.fromkeys(rng.sample(_JSON_FIELDS, rng.randrange(1, 4))):
        # Often near Python's recursion limit (1000 frames, less the caller's stack).
        depth = rng.choice((0, 1, 2, rng.randrange(1_200), rng.randrange(900, 1_000)))
        opened = [b"[" if rng.random() < 0.7 else b'{"k": ' for _ in range(depth)]
        closed = [b"]" if part == b"[" else b"}" for part in reversed(opened)]
        fields.append(b'"%s": %s%s%s' % (name, b"".join(opened), rng.choice(_JSON_LEAVES),
                                         b"".join(closed)))  # fmt: skip
    return b"{" + b", ".join(fields) + b"}"


def _json_values(rng: random.Random) -> list[bytes | None]:
    values: list[bytes | None] = []
    for _ in range(rng.randrange(1, 5)):
        if rng.random() < 0.1:
            values.append(None)  # a delete
        elif rng.random() < 0.5:
            values.append(_json_document(rng))
        else:
            base = rng.choice(_JSON_CORPUS)
            values.append(mutate(rng, base, _JSON_PIECES, _JSON_CORPUS, (b"[", b"]")))
    return values


# Options of the follower source, the snapshot reader and the sink.
_OPTIONS: dict[str, tuple[Callable[[dict[str, str]], object], dict[str, str]]] = {
    "source": (
        parse_source_options,
        {
            "path": "/tmp/s",
            "kafka.bootstrap.servers": "b:9092",
            "changelog": "app-s-changelog",
            "startingOffsets": '{"app-s-changelog": {"0": 5, "1": -2}}',
            "maxOffsetsPerTrigger": "100",
            "partitions": "0,2-3",
            "keyPrefix": "hex:6b31",
            "storeType": "window",
            "keyFormat": "string",
            "valueFormat": "json",
            "valueSchema": "id INT, tags ARRAY<STRING>",
            "mode": "permissive",
            "servePort": "0",
        },
    ),
    "reader": (
        parse_reader_options,
        {
            "path": "/tmp/s",
            "positionBound": '{"orders": {"0": 4}}',
            "positionBoundTimeoutMs": "2500",
            "maxLag": "0",
            "keyFormat": "string",
            "keys": '["a", "b"]',
            "keyFrom": "a",
            "keyTo": "hex:7a",
            "partitions": "0-3",
        },
    ),
    "sink": (
        lambda raw: parse_sink_options(raw, streaming=False),
        {
            "path": "/tmp/s",
            "changelog": "app-s-changelog",
            "application.id": "app",
            "kafka.bootstrap.servers": "b:9092",
            "txnAppId": "orders-agg",
            "txnVersion": "7",
            "uncommitted.max.bytes": "1048576",
            "allowForeignChangelog": "false",
        },
    ),
    "streaming sink": (
        lambda raw: parse_sink_options(raw, streaming=True),
        {
            "path": "/tmp/s",
            "checkpointLocation": "hdfs://nn:8020/cp/orders",
            "fs.defaultFS": "hdfs://nn:8020",
            "dfs.namenode.http-address": "nn1:9870,[::1]:9870",
            "fs.s3a.endpoint": "http://objects:9000",
            "fs.s3a.path.style.access": "true",
        },
    ),
}
_OPTION_TEXTS = [text for _, base in _OPTIONS.values() for text in base.values()]
_OPTION_PIECES = [
    *_ODD_CHARACTERS, *_TEXT_NUMBERS, *_DDL_PIECES[:8], "{", "}", "[", "]", '"', ":", ",",
    "hex:", "-", "latest", "earliest", "true", "x" * 300,
]  # fmt: skip
_OPTION_NESTS = [("[", "]"), ("{", "}"), ('{"a": ', "}"), ("ARRAY<", ">")]


def _options(rng: random.Random) -> tuple[str, dict[str, str]]:
    surface = rng.choice(list(_OPTIONS))
    raw = dict(_OPTIONS[surface][1])
    for _ in range(rng.randrange(1, 4)):
        name = rng.choice(list(raw)) if raw else "path"
        choice = rng.randrange(10)
        if choice == 0:
            raw.pop(name, None)
        elif choice == 1:
            raw[mutate(rng, name, _OPTION_PIECES, list(raw) or ["path"])] = rng.choice(
                _OPTION_TEXTS
            )
        elif choice == 2:
            raw[name] = rng.choice(_OPTION_TEXTS)  # another option's valid value
        else:
            nest = rng.choice(_OPTION_NESTS)
            raw[name] = mutate(rng, raw[name], _OPTION_PIECES, _OPTION_TEXTS, nest)
    return surface, raw


def _parse_options(case: tuple[str, dict[str, str]]) -> None:
    surface, raw = case
    parse, _ = _OPTIONS[surface]
    parse({name.lower(): value for name, value in raw.items()})


# checkpointLocation: a Hadoop Path, its default filesystem, and what reads it.
_LOCATION_CORPUS = [
    "/tmp/cp/orders",
    "file:///tmp/a%20b",
    "file://localhost/tmp/x",
    "hdfs://nn:8020/a/../b//c/",
    "s3a://bucket/k?x#y",
    "abfss://c@acct.dfs.core.windows.net/cp",
    "webhdfs://[::1]:9870/cp",
    "rel/./dir",
]
_LOCATION_PIECES = [":", "/", "//", ".", "..", "%", "%2", "@", "?", "#", "[", "]", "file:", "x:"]
_DEFAULT_FS = CheckpointLocation.parse("hdfs://nn:8020")


def _parse_location(text: str) -> None:
    location = CheckpointLocation.parse(text)
    assert CheckpointLocation.parse(str(location)) == location, str(location)
    check_readable(location.qualified(_DEFAULT_FS), FilesystemSettings())


# Flight tickets, action bodies and store descriptions; scan specs; remote queries.
_QUERY_CORPUS = [
    StateQueryRequest.in_store("s").with_query(query).with_partitions([0, 2])
    for query in (
        KeyQuery.with_key(b"a"),
        KeyQuery.with_key("typed"),
        RangeQuery.with_range(b"a", None).with_descending_keys(),
        PrefixQuery.with_prefix(b"user-"),
        RawScanQuery.scan().with_limit(3),
        VersionedKeyQuery.with_key(bytearray(b"k")).as_of(5),
        MultiVersionedKeyQuery.with_key(b"k").from_time(1).to_time(9),
    )
] + [
    StateQueryRequest.in_store("s")
    .with_query(RawKeyQuery.with_key(b"k"))
    .with_position_bound(PositionBound.at(Position.from_map({"in": {0: 4}})))
    .require_active()
    .enable_execution_info()
]
_RESULT = StateQueryResult.for_partitions(
    {
        0: QueryResult.for_result([(b"k", b"v")], Position.from_map({"in": {0: 4}}), ["info"]),
        1: QueryResult.for_result(VersionedRecord(b"v", 1, 9), Position.empty()),
        2: QueryResult.for_result([VersionedRecord(b"v", 1, None)], Position.empty()),
        3: QueryResult.for_failure(FailureReason.NOT_PRESENT, "not here"),
        4: QueryResult.for_result(b"v", Position.empty()),
    }
)
_SCAN_CORPUS = [
    ScanSpec.for_keys([b"a", b"\xff"]).with_partitions([0, 3]).to_json(),
    ScanSpec.between(b"a", b"z").with_limit(10).to_json(),
    ScanSpec.with_prefix(b"user-").to_json(),
    ScanSpec.everything().to_json(),
]
_FLIGHT_CORPUS = [
    *(f'{{"snapshot_id": "s-1", "scan": {spec}}}'.encode() for spec in _SCAN_CORPUS),
    b'{"snapshot_id": null, "scan": {}}',
    json.dumps(valid_description()).encode(),
    json.dumps(
        {
            **valid_description(),
            "commit_record": {"query_id": "q", "batch_id": 3},
            "lags": {"0": {"current": 3, "end": 9, "lag": 6}},
            "owner": OWNER_DICT,
            "pins": 1,
            "location": None,
        }
    ).encode(),
    json.dumps({"orders": {"0": 41, "1": 7}}).encode(),
    b'{"0": {"current": 3, "end": 9, "lag": 6}, "1": {"current": 0, "end": 0, "lag": 0}}',
    b'{"kind": "bad_request", "message": "no"}',
    b'{"position_bound": {"orders": {"0": 4}}, "wait_ms": 250}',
    b"",
    *(json.dumps(encode_query_body(request, 250)).encode() for request in _QUERY_CORPUS),
    json.dumps(encode_result(_RESULT)).encode(),
]
_FLIGHT_PIECES = [*_JSON_PIECES, b"-1", b"2147483648", b"9223372036854775808", b"1.5", b'"YQ=="']


def _parse_flight(body: bytes) -> None:
    refused = 0
    decoders: list[Callable[[bytes], object]] = [
        ScanTicket.from_bytes,
        lambda raw: Position.from_dict(decode_object(raw, "action body")),
        lambda raw: StoreDescription.from_dict(decode_object(raw, "reply")),
        lambda raw: DescribeReply.from_dict(decode_object(raw, "reply")),
        lambda raw: lags_from_dict(decode_object(raw, "reply")),
        ScanSpec.from_json,
        lambda raw: decode_query_body(decode_object(raw, "query body")),
        lambda raw: decode_result(decode_object(raw, "query reply")),
    ]
    for parse in decoders:
        try:
            parse(body)
        except StateStoreError:
            refused += 1
    decode_error_info(body)  # None or (kind, message), never an exception
    if refused == len(decoders):
        raise Refused("refused by every decoder")


# Single-key queries in the compact binary form (the query_key action): bodies and replies.
_KEY_POSITION = Position.from_map({"in": {0: 4, 1: 2**63 - 1}})
_KEY_WIRE_CORPUS = [
    *(encode_key_query(request, 250) for request in _QUERY_CORPUS if travels_compact(request)),
    encode_key_query(
        StateQueryRequest.in_store("s")
        .with_query(KeyQuery.with_key(b""))
        .with_partitions([2**31 - 1])
    ),
    encode_key_reply(
        "store-1",
        StateQueryResult.for_partitions(
            {
                0: QueryResult.for_result(b"v", _KEY_POSITION, ["info"]),
                1: QueryResult.for_result(None, _KEY_POSITION),
                2: QueryResult.for_result(None, _KEY_POSITION),
                3: QueryResult.for_failure(FailureReason.NOT_UP_TO_BOUND, "behind \u00fc"),
            }
        ),
    ),
    encode_key_reply("s", StateQueryResult.for_global(QueryResult.for_result(b"g", _KEY_POSITION))),
    encode_key_reply(
        "s", StateQueryResult.for_partitions({0: QueryResult.for_result(b"v", _KEY_POSITION)}), True
    ),
]
_KEY_WIRE_PIECES = [*_BYTE_PIECES, b"{}", b'{"in":{"0":1}}', b"NOT_PRESENT", b"\x0bNOT_ACTIVE"]


def _parse_key_wire(data: bytes) -> None:
    refused = 0
    try:
        request, wait_ms, with_rule = decode_key_query(data)
    except StateStoreError:
        refused += 1
    else:
        again = encode_key_query(request, wait_ms, with_rule=with_rule)
        assert decode_key_query(again) == (request, wait_ms, with_rule)
    try:
        reply = decode_key_reply(data)
    except StateStoreError:
        refused += 1
    else:
        assert decode_key_reply(encode_key_reply(*reply)) == reply
    if refused == 2:
        raise Refused("neither a query_key body nor a reply")


_ANNOUNCEMENT_CORPUS = [
    make_announcement().to_bytes(),
    make_announcement(
        replica_id="leader",
        role=Role.LEADER,
        location="grpc+tls://[::1]:8815",
        held_partitions=(1, 3),
        key_prefix=b"eu-",
        position=Position.from_map({"orders": {0: 41, 1: 7}, "returns": {2: 0}}),
        lags={1: LagInfo(3, 9), 3: LagInfo(0, 0)},
    ).to_bytes(),
    make_announcement(location=None, partitions=1, held_partitions=(0,)).to_bytes(),
]
_ANNOUNCEMENT_PIECES = [
    *_JSON_PIECES, b"-1", b"2147483648", b"9223372036854775808", b"1.5", b'"YQ=="',
    b'"leader"', b'"grpc://h:0"', b'"grpc://h:65536"', b"[0,0]", b"[]", b'"version":2',
]  # fmt: skip


def _parse_announcement(raw: bytes) -> None:
    announcement = ReplicaAnnouncement.from_bytes(raw)
    assert ReplicaAnnouncement.from_bytes(announcement.to_bytes()) == announcement


_SINK_COMMIT_CORPUS = [
    json.dumps(
        batch_to_json(
            BatchToCommit(
                "3f2a-query",
                7,
                [
                    StagedFile("3f2a-query/7/part-00000-0-a1b2.arrow", 0, 10, 999),
                    StagedFile(
                        "3f2a-query/7/part-00001-1-c3d4.arrow", 1, 2, 50, {"orders": {0: 4, 3: 9}}
                    ),
                ],
                [{"orders": {"0": 5}}],
                False,
            )
        )
    ).encode(),
    json.dumps(batch_to_json(BatchToCommit("app", 0, [], None, True))).encode(),
]
_SINK_COMMIT_PIECES = [
    *_JSON_PIECES, b'"../x/part-1.arrow"', b'"a/1/part-0.arrow"', b'"a//part-0.arrow"',
    b'"a/1/x.arrow"', b'"/etc/passwd"', b"-1", b"true", b'"0"', b'"-1"', b'"\\u0000"',
]  # fmt: skip


def _parse_sink_commit(raw: bytes) -> None:
    from spark_statestore.serve.protocol import decode_object

    batch = batch_from_json(decode_object(raw, "body of action 'sink_commit'"))
    for staged in batch.staged:
        parts = staged.name.split("/")
        assert len(parts) == 3 and ".." not in parts and not staged.name.startswith("/")
    again = batch_from_json(json.loads(json.dumps(batch_to_json(batch))))
    assert again == batch


# Schema-registry frames (Avro/JSON Schema, and Protobuf with its message indexes).
_FRAME_CORPUS = [
    encode_frame(1, b"payload"),
    encode_frame(2**31 - 1, b""),
    encode_frame(7, b"\x02\x04", (0,)),
    encode_frame(7, b"\x02", (1, 0, 3)),
    encode_frame(12, b"x" * 40, (2, 5)),
]
_FRAME_PIECES = [*_BYTE_PIECES, b"\x00", b"\x80", b"\xff\xff\xff\xff\x0f", b"\x7f", b"\x01"]


def _parse_frames(raw: bytes) -> None:
    frame = parse_frame(raw)
    assert raw[: frame.payload_offset] == encode_frame(frame.schema_id, b"")
    framed = parse_message_indexes(raw)
    assert framed.schema_id == frame.schema_id
    assert framed.message_indexes is not None and framed.payload_offset <= len(raw)
    payload = raw[framed.payload_offset :]
    again = parse_message_indexes(encode_frame(frame.schema_id, payload, framed.message_indexes))
    assert again.message_indexes == framed.message_indexes


# Avro values as Apache Avro's own writer frames them, decoded to an evolved reader schema.
_AVRO_WRITER = {
    "type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "lines", "type": {"type": "array", "items": {
            "type": "record", "name": "Line", "fields": [
                {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
        {"name": "tags", "type": {"type": "map", "values": "long"}},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}},
        {"name": "price", "type": {
            "type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "either", "type": ["null", "string", "long", "Line"], "default": None},
    ],
}  # fmt: skip
_AVRO_READER = {
    **_AVRO_WRITER,
    "fields": [
        *(f for f in _AVRO_WRITER["fields"] if f["name"] != "note"),
        {"name": "added", "type": "double", "default": 1.5},
    ],
}


def _avro_corpus() -> list[bytes]:
    import io as _io

    import avro.io
    import avro.schema

    schema = avro.schema.parse(json.dumps(_AVRO_WRITER))
    values = []
    for number in range(4):
        datum = {
            "id": number * 1_000_003 - 7,
            "note": None if number % 2 else "n" * number,
            "lines": [{"sku": f"s{n}", "qty": n} for n in range(number)],
            "tags": {f"t{n}": -n for n in range(number)},
            "color": ("RED", "BLUE")[number % 2],
            "price": decimal.Decimal(f"{number}.{number:02d}"),
            "either": (None, "text", 42, {"sku": "x", "qty": 1})[number],
        }
        out = _io.BytesIO()
        avro.io.DatumWriter(schema).write(datum, avro.io.BinaryEncoder(out))
        values.append(encode_frame(number % 2 + 1, out.getvalue()))
    return values


_AVRO_CORPUS = _avro_corpus()


def _avro_decoder() -> AvroValueDecoder:
    text = json.dumps(_AVRO_WRITER)
    writers = [AvroSchema.parse(text, what="writer", schema_id=n) for n in (1, 2)]
    reader = AvroSchema.parse(json.dumps(_AVRO_READER), what="reader", schema_id=3)
    return AvroValueDecoder(reader, lookup_of(*writers), subject="orders-value")


_AVRO_DECODER = _avro_decoder()


def _parse_avro(raw: bytes) -> None:
    array, bad = _AVRO_DECODER.decode([raw], locate=lambda i: f"input {i}", permissive=False)
    assert bad == 0 and array.type == _AVRO_DECODER.arrow_type and len(array) == 1


_REFUSED = object()


def _parse_registry_value(decoders: Sequence[ValueDecoder], raw: bytes) -> None:
    """``raw`` decoded by each of ``decoders``: a value pyarrow takes for the reader's type,
    or a :class:`SchemaError` (any other error of ours is a bug too); a value the first
    decoder takes, the others take alike."""
    values = []
    for decoder in decoders:
        try:
            value = decoder.decode_one(raw)
        except SchemaError:
            values.append(_REFUSED)
            continue
        except StateStoreError as exc:
            raise AssertionError(f"{exc!r} is not a SchemaError") from exc
        pa.array([value], type=decoder.arrow_type)  # ArrowInvalid, ... fail the input
        values.append(value)
    if values[0] is not _REFUSED:
        assert all(v == values[0] for v in values), f"the decoders disagree: {values}"
    if all(v is _REFUSED for v in values):
        raise Refused("refused by every decoder")


# Protobuf values: payloads the protobuf library wrote (with the reader's message or an older
# one), mutated or random, under random message indexes, parsed as the reader's message.
_PROTOBUF = """
syntax = "proto3";
package fuzz;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
enum Color { RED = 0; BLUE = 1; }
message Order {
  message Part { float ratio = 1; bool ok = 2; }
  int64 id = 1; string note = 2; repeated Line lines = 3; map<string, sint64> tags = 4;
  Color color = 5; google.protobuf.Timestamp at = 6; double price = 7; Part part = 8;
  oneof pick { uint64 big = 9; bytes raw = 10; Line line = 11; }
  optional fixed32 code = 12; google.protobuf.Int64Value boxed = 13;
}
message Line { string sku = 1; int32 qty = 2; }
message OrderV1 { int64 id = 1; string note = 2; repeated Line lines = 3; sint32 skipped = 20; }
"""
_PROTOBUF_INDEXES = [(0,), (0,), (0,), (2,), (1,), (0, 0), (3,), (), (0, 1), (-1,), (2**31,)]


@functools.cache  # built when first fuzzed: protoc compiles the schema
def _protobuf_decoder() -> ProtobufValueDecoder:
    writers = [ProtobufSchema.parse(_PROTOBUF, what="writer", schema_id=n) for n in (1, 2)]
    reader = ProtobufSchema.parse(_PROTOBUF, what="reader", schema_id=3)
    return ProtobufValueDecoder(reader, lookup_of(*writers), message="fuzz.Order")


@functools.cache
def _protobuf_corpus() -> list[bytes]:
    from google.protobuf import message_factory

    schema = _protobuf_decoder().reader
    order = message_factory.GetMessageClass(schema.message("fuzz.Order"))
    old = message_factory.GetMessageClass(schema.message("fuzz.OrderV1"))
    values = [
        order(),
        order(id=-(2**63), note="é😀", lines=[{"sku": "a", "qty": -1}, {}], tags={"t": -5},
              color=1, at={"seconds": -62135596800}, price=float("nan"), part={"ratio": 1.5},
              big=2**64 - 1, code=7, boxed={"value": 2**63 - 1}),
        order(id=7, raw=b"\xff" * 40, color=5, at={"seconds": 253402300799, "nanos": 999999999}),
        order(line={"sku": "x" * 300}, tags={"": 0, "k": 2**63 - 1}),
        old(id=3, note="v1", lines=[{"qty": 2}], skipped=-9),
    ]  # fmt: skip
    payloads = [value.SerializeToString() for value in values]
    return [encode_frame(n % 2 + 1, p, (2,) if n == 4 else (0,)) for n, p in enumerate(payloads)]


_PROTOBUF_PIECES = [*_FRAME_PIECES, b"\x08", b"\x12\x7f", b"\x1a\x00", b"\x0a\x80\x80"]


def _protobuf_value(rng: random.Random) -> bytes:
    corpus = _protobuf_corpus()
    shape = rng.randrange(4)
    if shape == 0:  # a random payload
        payload = rng.randbytes(rng.choice((0, 1, 2, 5, rng.randrange(64))))
    else:  # a written payload, mutated at times
        written = rng.choice(corpus)
        payload = written[parse_message_indexes(written).payload_offset :]
        if shape == 1:
            payload = mutate(rng, payload, _PROTOBUF_PIECES, corpus)
    if rng.random() < 0.2:  # indexes at random
        indexes = tuple(rng.randrange(-2, 5) for _ in range(rng.randrange(4)))
    else:
        indexes = rng.choice(_PROTOBUF_INDEXES)
    raw = encode_frame(rng.choice((1, 1, 2, 9)), payload, indexes)
    return mutate(rng, raw, _PROTOBUF_PIECES, corpus) if shape == 3 else raw


def _parse_protobuf(raw: bytes) -> None:
    _parse_registry_value([_protobuf_decoder()], raw)


# JSON Schema values: JSON texts written, mutated or random, decoded validating (against the
# writer schema) and not; a value that validates reads the same either way.
_JSON_SCHEMA_PROPERTIES = {
    "id": {"type": "integer"},
    "price": {"type": ["number", "null"]},
    "at": {"type": "string", "format": "date-time"},
    "day": {"type": "string", "format": "date"},
    "lines": {"type": "array", "items": {"$ref": "#/definitions/line"}},
    "tags": {"type": "object", "additionalProperties": {"type": "integer"}},
    "color": {"enum": ["RED", "BLUE", None]},
    "extra": {},
    "qty": {"type": "integer", "default": 1},
}
_JSON_SCHEMA_READER = {
    "type": "object",
    "properties": _JSON_SCHEMA_PROPERTIES,
    "definitions": {"line": {"properties": {"sku": {"type": "string"}, "ok": {"type": "boolean"}}}},
}
_JSON_SCHEMA_WRITERS = {1: _JSON_SCHEMA_READER, 2: {"type": "object"}, 3: True}
_JSON_SCHEMA_CORPUS = [
    b'{"id": 7, "price": 1.5, "at": "2026-11-28T01:02:03.123456789+05:30", "day": "2024-02-29",'
    b' "lines": [{"sku": "a", "ok": true}, {}], "tags": {"t": -9223372036854775808},'
    b' "color": "BLUE", "extra": {"z": [1, "two", null]}}',
    b'{"id": 2.0, "price": null, "lines": [], "tags": {}, "color": null, "extra": 1e400}',
    b'{"id": 9223372036854775808, "at": "2016-12-31T23:59:60Z", "day": "2026-02-30"}',
    b'{"id": "7", "lines": {"sku": 1}, "tags": [1], "extra": "\\ud800"}',
    b'{"qty": 1, "qty": 2}',
    b"[]",
    b"{}",
]


def _json_schema_decoders() -> list[JsonSchemaValueDecoder]:
    reader = JsonSchema.parse(json.dumps(_JSON_SCHEMA_READER), what="reader", schema_id=1)
    writers = [
        JsonSchema.parse(json.dumps(body), what="writer", schema_id=schema_id)
        for schema_id, body in _JSON_SCHEMA_WRITERS.items()
    ]
    return [
        JsonSchemaValueDecoder(reader, lookup_of(*writers), validate=validate)
        for validate in (True, False)
    ]


_JSON_SCHEMA_DECODERS = _json_schema_decoders()


def _json_leaf(rng: random.Random) -> Any:
    return rng.choice(
        [None, True, 0, -1, 2**63, 1.5, "", "x", "2026-11-28", "2026-11-28T01:02:03Z", [], {}]
    )


def _json_schema_value(rng: random.Random) -> bytes:
    shape = rng.randrange(4)
    if shape == 0:  # random bytes
        payload = rng.randbytes(rng.randrange(24))
    elif shape == 1:  # a random object of the reader's property names
        names = rng.sample(list(_JSON_SCHEMA_PROPERTIES), rng.randrange(5))
        value = {name: _json_leaf(rng) for name in names}
        payload = json.dumps(value).encode()
    else:
        payload = rng.choice(_JSON_SCHEMA_CORPUS)
        if shape == 2:
            payload = mutate(rng, payload, _JSON_PIECES, _JSON_SCHEMA_CORPUS, (b"[", b"]"))
    return encode_frame(rng.choice((1, 1, 2, 2, 3, 9)), payload)


def _parse_json_schema(raw: bytes) -> None:
    _parse_registry_value(_JSON_SCHEMA_DECODERS, raw)


def _mutated(
    corpus: Sequence[T], pieces: Sequence[T], nest: tuple[T, T] | None = None
) -> Callable[[random.Random], T]:
    return lambda rng: mutate(rng, rng.choice(corpus), pieces, corpus, nest)


TARGETS = [
    Target("position headers", _header_records, _parse_headers),
    Target("window and session keys", _mutated(_KEY_CORPUS, _BYTE_PIECES), _parse_keys),
    Target("DDL", _mutated(_DDL_CORPUS, _DDL_PIECES, ("ARRAY<", ">")), _parse_ddl),
    Target("JSON values", _json_values, _parse_json),
    Target("options", _options, _parse_options),
    Target(
        "checkpoint locations",
        _mutated(_LOCATION_CORPUS, _LOCATION_PIECES, ("a/", "/..")),
        _parse_location,
    ),
    Target(
        "Flight tickets and actions",
        _mutated(_FLIGHT_CORPUS, _FLIGHT_PIECES, (b"[", b"]")),
        _parse_flight,
    ),
    Target(
        "sink commit actions",
        _mutated(_SINK_COMMIT_CORPUS, _SINK_COMMIT_PIECES, (b"[", b"]")),
        _parse_sink_commit,
    ),
    Target(
        "compact key queries",
        _mutated(_KEY_WIRE_CORPUS, _KEY_WIRE_PIECES),
        _parse_key_wire,
    ),
    Target("schema-registry frames", _mutated(_FRAME_CORPUS, _FRAME_PIECES), _parse_frames),
    Target("Avro values", _mutated(_AVRO_CORPUS, _FRAME_PIECES), _parse_avro),
    Target("Protobuf values", _protobuf_value, _parse_protobuf),
    Target("JSON Schema values", _json_schema_value, _parse_json_schema),
    Target(
        "replica announcements",
        _mutated(_ANNOUNCEMENT_CORPUS, _ANNOUNCEMENT_PIECES, (b"[", b"]")),
        _parse_announcement,
    ),
]


# -- the loop ---------------------------------------------------------------------------------
def fuzz(target: Target, inputs: int, seed: int) -> tuple[int, int]:
    """Run ``inputs`` generated inputs through ``target``; ``(accepted, refused)``."""
    rng = random.Random(seed)
    accepted = refused = 0
    for index in range(inputs):
        data = target.generate(rng)
        try:
            target.parse(data)
        except StateStoreError:
            refused += 1
        except Exception as exc:
            shown = repr(data)
            if len(shown) > 600:
                shown = shown[:600] + f"... ({len(shown)} characters)"
            pytest.fail(
                f"{target.name}: input #{index} of seed {seed:#x} raised {exc!r}; replay it with "
                f"fuzz(<{target.name}>, {index + 1}, {seed:#x}). The input: {shown}"
            )
        else:
            accepted += 1
    return accepted, refused


def _check_reach(target: Target, accepted: int, refused: int) -> None:
    # Both outcomes, or the mutations are not reaching past the first check (or never fail).
    total = accepted + refused
    assert accepted >= total // 50, f"{target.name}: only {accepted} of {total} inputs accepted"
    assert refused >= total // 50, f"{target.name}: only {refused} of {total} inputs refused"


@pytest.mark.parametrize("target", TARGETS, ids=lambda target: target.name)
def test_fuzz_slice(target: Target) -> None:
    accepted, refused = fuzz(target, CI_INPUTS, seed=0x5EED)
    _check_reach(target, accepted, refused)


@pytest.mark.soak
@pytest.mark.parametrize("target", TARGETS, ids=lambda target: target.name)
def test_fuzz_soak(target: Target) -> None:
    seed = random.SystemRandom().randrange(2**32)  # a new slice of the input space each run
    accepted, refused = fuzz(target, SOAK_INPUTS, seed)
    _check_reach(target, accepted, refused)


def test_the_soak_runs_over_a_million_inputs() -> None:
    assert SOAK_INPUTS * len(TARGETS) >= 1_000_000


# -- found by fuzzing in spark_statestore/serve/protocol.py --------------------------------


@pytest.mark.parametrize("offset", ["Infinity", "-Infinity", "1e400"])
def test_changelog_offsets_of_a_description_that_are_not_integers_are_refused(offset: str) -> None:
    from spark_statestore.serve.errors import BadRequestError

    raw = json.dumps({**valid_description(), "changelog_offsets": {"0": "OFFSET"}})
    description = decode_object(raw.replace('"OFFSET"', offset).encode(), "result")
    with pytest.raises(BadRequestError):
        StoreDescription.from_dict(description)


def test_changelog_offsets_partitions_take_ascii_digits_only() -> None:
    from spark_statestore.serve.errors import BadRequestError

    with pytest.raises(BadRequestError):  # int() reads the Arabic-Indic digit as 3
        StoreDescription.from_dict({**valid_description(), "changelog_offsets": {"\u0663": 12}})


def test_lags_that_are_not_integers_are_refused() -> None:
    from spark_statestore.serve.errors import BadRequestError
    from spark_statestore.serve.protocol import lags_from_dict

    with pytest.raises(BadRequestError):
        lags_from_dict(decode_object(b'{"0": {"current": 1e400, "end": 1}}', "result"))


def test_deeply_nested_error_info_holds_no_error() -> None:
    from spark_statestore.serve.protocol import decode_error_info

    assert decode_error_info(b"[" * 100_000) is None
