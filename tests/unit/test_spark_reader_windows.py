"""The snapshot reader on window and session stores (``storeType``), without a JVM: a store
holding Kafka Streams' window and session key layouts, read by planning and running the
reader's one task in Python. Every lookup option must return exactly the rows whose *user*
key it selects, although the store holds ``user key | window suffix``."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.changelog.keys import encode_session_key, encode_window_key
from spark_statestore.connectors.spark.ddl import parse_ddl
from spark_statestore.connectors.spark.errors import DecodeError
from spark_statestore.connectors.spark.options import parse_reader_options
from spark_statestore.connectors.spark.reader.snapshot import (
    PushdownSnapshotReader,
    SnapshotReader,
    reader_ddl,
)
from spark_statestore.errors import OptionError
from spark_statestore.store import Role, Store, StoreSpec

SIZE_MS = 100
# User keys where one is a prefix of others, an empty one, and bytes above any suffix byte.
USER_KEYS = [b"", b"a", b"ab", b"abc", b"a\xff", b"b", b"ba", b"\xff", b"a\x00"]
STARTS = [0, 100, 2**40, 2**47 + 1]  # up to year 6429 (Python datetimes end at 9999)


def read(path: Path, **options: str) -> list[dict[str, Any]]:
    """Plan and run the reader's task (no owner: it reads the store itself)."""
    parsed = parse_reader_options({"path": str(path), **{k.lower(): v for k, v in options.items()}})
    reader = SnapshotReader(parsed, parse_ddl(reader_ddl(parsed)))
    rows: list[dict[str, Any]] = []
    for partition in reader.partitions():
        for batch in reader.read(partition):
            rows += batch.to_pylist()
    return rows


@pytest.fixture
def window_store(tmp_path: Path) -> Path:
    path = tmp_path / "windows"
    with Store.open(path, StoreSpec(Role.FOLLOWER, "w-changelog", 2)) as store, store.begin() as t:
        offset = 0
        for key in USER_KEYS:
            for start in STARTS:
                offset += 1
                stored = encode_window_key(key, start, 0)
                t.put(stored, b"%d" % offset, partition=offset % 2, offset=offset, timestamp=start)
    return path


@pytest.fixture
def session_store(tmp_path: Path) -> Path:
    path = tmp_path / "sessions"
    with Store.open(path, StoreSpec(Role.FOLLOWER, "s-changelog", 1)) as store, store.begin() as t:
        for i, key in enumerate(USER_KEYS):
            t.put(encode_session_key(key, 10 * i, 10 * i + 5), b"v", offset=i)
    return path


def stamp(row: dict[str, Any], column: str) -> int:
    return int(row[column].timestamp() * 1000)


def test_window_keys_become_key_window_start_and_window_end(window_store: Path) -> None:
    rows = read(window_store, storeType="window", windowSizeMs=str(SIZE_MS))
    assert len(rows) == len(USER_KEYS) * len(STARTS)
    assert list(rows[0]) == [
        "key",
        "value",
        "partition",
        "offset",
        "timestamp",
        "window_start",
        "window_end",
    ]
    got = {(r["key"], stamp(r, "window_start"), stamp(r, "window_end")) for r in rows}
    assert got == {(k, s, s + SIZE_MS) for k in USER_KEYS for s in STARTS}


def test_session_keys_become_key_session_start_and_session_end(session_store: Path) -> None:
    rows = read(session_store, storeType="session", keyFormat="binary")
    got = {(r["key"], stamp(r, "session_start"), stamp(r, "session_end")) for r in rows}
    assert got == {(k, 10 * i, 10 * i + 5) for i, k in enumerate(USER_KEYS)}


def expected(select: Any) -> set[tuple[bytes, int]]:
    return {(k, s) for k in USER_KEYS for s in STARTS if select(k)}


def test_lookup_options_select_exactly_the_user_keys(window_store: Path) -> None:
    """Each lookup option against a brute-force check of the user keys (random draws)."""
    rng = random.Random(7)
    window = {"storeType": "window", "windowSizeMs": str(SIZE_MS)}

    def hexed(key: bytes) -> str:
        return "hex:" + key.hex()

    for _ in range(60):
        chosen = rng.sample([*USER_KEYS, b"zz", b"a\x00\x00"], rng.randrange(0, 4))
        rows = read(window_store, keys=json.dumps([hexed(k) for k in chosen]), **window)
        assert {(r["key"], stamp(r, "window_start")) for r in rows} == expected(
            lambda k, c=chosen: k in c
        ), chosen
        prefix = rng.choice([b"a", b"ab", b"a\x00", b"\xff", b"b"])
        rows = read(window_store, keyPrefix=hexed(prefix), **window)
        assert {(r["key"], stamp(r, "window_start")) for r in rows} == expected(
            lambda k, p=prefix: k.startswith(p)
        ), prefix
        low, high = sorted(rng.sample(USER_KEYS, 2))
        rows = read(window_store, keyFrom=hexed(low), keyTo=hexed(high), **window)
        assert {(r["key"], stamp(r, "window_start")) for r in rows} == expected(
            lambda k, lo=low, hi=high: lo <= k <= hi
        ), (low, high)
    rows = read(window_store, keyTo=hexed(b"a"), partitions="1", **window)
    assert {(r["key"], r["partition"]) for r in rows} == {
        (k, 1) for k in (b"", b"a") for _ in STARTS
    }


def test_key_filters_are_not_pushed_into_a_window_store(window_store: Path) -> None:
    """A pushed ``key = x`` would be a lookup of the stored key ``x``, which a window store
    does not hold: key filters stay with Spark there, partition filters are pushed."""
    from pyspark.sql.datasource import EqualTo

    options = parse_reader_options(
        {"path": str(window_store), "storetype": "window", "windowsizems": "100"}
    )
    reader = PushdownSnapshotReader(options, parse_ddl(reader_ddl(options)))
    filters = [EqualTo(("key",), b"a"), EqualTo(("partition",), 1)]
    assert list(reader.pushFilters(filters)) == [filters[0]]


def test_undecodable_window_keys_follow_mode(tmp_path: Path) -> None:
    path = tmp_path / "mixed"
    with Store.open(path, StoreSpec(Role.FOLLOWER, "m-changelog", 1)) as store, store.begin() as t:
        t.put(b"short", b"v", offset=41)
        t.put(encode_window_key(b"ok", 5, 0), b"v", offset=42)
    window = {"storeType": "window", "windowSizeMs": "10"}
    with pytest.raises(DecodeError, match=r"store .*mixed key b'short'.*partition 0 offset 41"):
        read(path, **window)
    rows = read(path, mode="PERMISSIVE", **window)
    assert [(r["key"], r["window_start"] is None, r["offset"]) for r in rows] == [
        (b"ok", False, 42),
        (None, True, 41),  # stored keys sort b"ok..." before b"short"
    ]


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"storeType": "window"}, "option 'windowSizeMs' is required with storeType 'window'"),
        ({"windowSizeMs": "10"}, "storeType is 'keyValue': drop windowSizeMs"),
        ({"storeType": "session", "windowSizeMs": "10"}, "storeType is 'session'"),
        ({"storeType": "window", "windowSizeMs": "0"}, "'windowSizeMs'"),
        ({"storeType": "sessions"}, "did you mean 'session'"),
    ],
)
def test_window_options_are_checked(options: dict[str, str], fragment: str) -> None:
    with pytest.raises(OptionError, match=fragment):
        parse_reader_options({"path": "/s", **{k.lower(): v for k, v in options.items()}})
    # Views without keys need no window size.
    parse_reader_options({"path": "/s", "storetype": "window", "view": "lag"})
