"""The store commands' output, run in this process against stores on disk (no broker; a
server in this process for mutual TLS): what inspect, lag and query print, and their exit
codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_statestore.cli import main
from spark_statestore.cli.table import render_table
from spark_statestore.errors import OptionError
from spark_statestore.serve import StoreServer
from spark_statestore.store import CommitRecord, Role, Store, StoreSpec
from tests.pki import Pki


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
    assert lines["owner"].strip() == "none (no process has the store open)"

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


def test_query_a_mutual_tls_server_with_a_client_certificate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pki: Pki
) -> None:
    path = tmp_path / "counts"
    spec = StoreSpec(Role.LEADER, None, 1, "c")
    with Store.open(path, spec, purpose="test", serves=True) as store:
        with store.begin() as txn:
            txn.put(b"apple", b"7", source=("in", 0, 1))
        server = StoreServer(
            store, tls_certificates=(pki.server, pki.server_key), tls_client_ca=pki.ca
        )
        with server:
            token = tmp_path / "token"
            token.write_text(server.token)
            location = ["query", server.location, "--key", "apple", "--json"]
            location += ["--token-file", str(token), "--tls-root-cert", pki.file("ca")]

            def query(*flags: str) -> tuple[int, str, str]:
                code = main([*location, *flags])
                out, err = capsys.readouterr()
                return code, out, err

            code, out, _ = query(
                "--tls-client-cert", pki.file("client"), "--tls-client-key", pki.file("client_key")
            )
            assert code == 0 and json.loads(out)["value"] == "7"
            # No client certificate, or one of another CA: refused in the TLS handshake.
            code, out, err = query()
            assert (code, out, err.count("\n")) == (2, "", 1)
            assert "(mutual TLS) and this client presented none" in err
            code, _, err = query(
                "--tls-client-cert",
                pki.file("stranger"),
                "--tls-client-key",
                pki.file("stranger_key"),
            )
            assert code == 2 and "refused this client's: it must be signed by a CA" in err
            code, _, err = query("--tls-client-cert", pki.file("client"))
            assert code == 2 and "--tls-client-cert and --tls-client-key go together" in err
            # The store's own readers: the server's own client certificate, from _serve.json.
            assert main(["query", str(path), "--key", "apple", "--json"]) == 0
            assert json.loads(capsys.readouterr().out)["value"] == "7"
            flags = ["--tls-client-cert", pki.file("client"), "--tls-client-key", "k"]
            assert main(["inspect", str(path), *flags]) == 2
            assert "go with a location, not a store directory" in capsys.readouterr().err


def test_serve_takes_client_cas_only_with_its_own_certificate(pki: Pki, tmp_path: Path) -> None:
    from spark_statestore.cli.serve import ServeOptions

    tls = {"tls_cert": pki.file("server"), "tls_key": pki.file("server_key")}
    options = ServeOptions.from_cli(path=str(tmp_path), tls_client_ca=pki.file("ca"), **tls)
    assert options.tls_client_ca == pki.ca
    with pytest.raises(OptionError, match="--tls-client-ca \\(mutual TLS\\) needs TLS"):
        ServeOptions.from_cli(path=str(tmp_path), tls_client_ca=pki.file("ca"))
    with pytest.raises(OptionError, match="option --tls-client-ca: cannot read"):
        ServeOptions.from_cli(path=str(tmp_path), tls_client_ca=str(tmp_path / "no"), **tls)
