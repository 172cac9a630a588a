"""The store commands' output, run in this process against stores on disk (no server, no
broker): what inspect, lag and query print, and their exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_statestore.cli import main
from spark_statestore.cli.table import render_table
from spark_statestore.store import CommitRecord, Role, Store, StoreSpec


def test_tables_align_numbers_right_and_text_left() -> None:
    table = render_table(("NAME", "N", "WHO"), [["a", "7", "-"], ["long name", "-", "-"]])
    assert table.splitlines() == ["NAME       N  WHO", "a          7  -", "long name  -  -"]


def test_inspect_shows_a_subset_followers_identity_and_a_sinks_commit_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    follower = tmp_path / "follower"
    spec = StoreSpec(Role.FOLLOWER, "t-changelog", 4, "t", held_partitions=(0, 2), key_prefix=b"us")
    with Store.open(follower, spec, purpose="test") as store, store.begin() as txn:
        txn.put(b"us-1", b"x", partition=0, offset=4)
        txn.set_changelog_offset(0, 5)
    leader = tmp_path / "leader"
    with (
        Store.open(leader, StoreSpec(Role.LEADER, None, 1, "l"), purpose="test") as store,
        store.begin() as txn,
    ):
        txn.set_commit_record(CommitRecord("q-1", 3, {"orders": {"0": 9}}))

    assert main(["inspect", str(follower)]) == 0
    lines = dict(line.split("  ", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["subset"].strip() == "holds partitions 0, 2; keys starting with 0x7573"
    assert lines["changelog"].strip() == "t-changelog, 4 partition(s)"
    assert lines["offsets"].strip() == "0:5  (partition:next offset)"
    assert lines["owner"].strip() == "none"

    assert main(["inspect", str(leader), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["commit_record"]["query_id"] == "q-1" and info["commit_record"]["batch_id"] == 3
    assert info["changelog_topic"] is None and info["role"] == "leader"
    assert main(["lag", str(leader)]) == 0
    assert "publishes no changelog: it has no lag" in capsys.readouterr().err


def test_query_decodes_numeric_keys_and_refuses_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "counts"
    with (
        Store.open(path, StoreSpec(Role.LEADER, None, 1, "c"), purpose="test") as store,
        store.begin() as txn,
    ):
        for n in (1, 2, 300):
            txn.put(n.to_bytes(8, "big"), str(n * n).encode(), source=("in", 0, n))

    argv = ["query", str(path), "--key-format", "long"]
    assert main([*argv, "--range", "2", "1000", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["key"], r["value"]) for r in rows] == [(2, "4"), (300, "90000")]

    assert main([*argv, "--all", "--limit", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["KEY", "VALUE", "PARTITION", "OFFSET", "TIMESTAMP"]
    assert out[1].split()[:2] == ["1", "1"] and len(out) == 2

    assert main([*argv, "--all", "--position-bound", '{"in": {"0": 301}}']) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NOT_UP_TO_BOUND" in err and "no live owner" in err
    assert main([*argv, "--all", "--max-lag", "1"]) == 2
    assert "it publishes no changelog" in capsys.readouterr().err
