"""Mutual TLS: a store server that refuses, in the TLS handshake, a client without a
certificate of the CAs it accepts (no JVM)."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.flight as flight
import pytest

import spark_statestore
from spark_statestore.errors import OptionError
from spark_statestore.query import KeyQuery, StateQueryRequest
from spark_statestore.serve import (
    ServerConfigError,
    ServerUnavailableError,
    StoreClient,
    StoreServer,
    TlsHandshakeError,
    connect,
    connect_to_owner,
)
from spark_statestore.serve.auth import CREDENTIALS_FILE, ServeCredentials, read_credentials
from spark_statestore.serve.mutual_tls import read_client_ca, read_client_identity
from spark_statestore.store import ScanSpec, Store
from tests.pki import Pki

MakeStore = Callable[..., Store]


@pytest.fixture
def served(make_store: MakeStore, pki: Pki) -> Iterator[Callable[..., StoreServer]]:
    """Factory: ``served(name="store", **server_kwargs)``: a store of one key (``k`` = ``v``),
    served over TLS with the test CA's server certificate."""
    servers: list[StoreServer] = []

    def factory(name: str = "store", **kwargs: Any) -> StoreServer:
        store = make_store(name)
        with store.begin() as txn:
            txn.put(b"k", b"v", source=("input", 0, 0))
        kwargs.setdefault("tls_certificates", (pki.server, pki.server_key))
        server = StoreServer(store, **kwargs)
        server.start()
        servers.append(server)
        return server

    yield factory
    for server in servers:
        server.close()


def _request() -> StateQueryRequest:
    return StateQueryRequest.in_store("store").with_query(KeyQuery.with_key(b"k"))


def _value(client: StoreClient) -> Any:
    return client.query(_request()).only_partition_result().result


def _client(server: StoreServer, pki: Pki, who: str | None = "client", **kwargs: Any) -> Any:
    """A client of ``server`` with its token, trusting the test CA, presenting the
    certificate ``who`` of the PKI (None: none)."""
    if who is not None:
        kwargs.update(tls_client_cert=getattr(pki, who), tls_client_key=getattr(pki, f"{who}_key"))
    return StoreClient(server.location, token=server.token, tls_root_certs=pki.ca, **kwargs)


def test_a_client_certificate_of_the_ca_is_served(
    served: Callable[..., StoreServer], pki: Pki
) -> None:
    server = served(tls_client_ca=pki.ca)
    assert server.mutual_tls and server.location.startswith("grpc+tls://")
    with _client(server, pki) as client:
        assert _value(client) == b"v"
        assert client.read_table(ScanSpec.everything()).num_rows == 1
    with spark_statestore.connect(
        server.location,
        token=server.token,
        tls_root_certs=pki.ca,
        tls_client_cert=pki.client,
        tls_client_key=pki.client_key,
    ) as client:
        assert _value(client) == b"v"


def test_a_client_without_a_certificate_fails_the_handshake(
    served: Callable[..., StoreServer], pki: Pki
) -> None:
    server = served(tls_client_ca=pki.ca)
    # The right token does not help: the connection ends in the TLS handshake.
    with (
        _client(server, pki, None) as client,
        pytest.raises(TlsHandshakeError, match="presented none: give a certificate") as info,
    ):
        client.describe()
    assert isinstance(info.value, ServerUnavailableError)
    assert "tls_client_cert and tls_client_key" in str(info.value)
    # A raw Flight client never reaches the token check (which answers "unauthenticated"),
    # and neither does a message of its: gRPC has no connection to read it from.
    raw = flight.FlightClient(server.location, tls_root_certs=pki.ca)
    with pytest.raises(flight.FlightUnavailableError):
        list(raw.do_action(flight.Action("describe", b"x" * 1_000_000)))
    raw.close()
    with server.client() as own:
        assert own.stats()["requests"] == 0


def test_a_certificate_of_another_ca_is_refused(
    served: Callable[..., StoreServer], pki: Pki
) -> None:
    server = served(tls_client_ca=pki.ca)
    with (
        _client(server, pki, "stranger") as client,
        pytest.raises(TlsHandshakeError, match="refused this client's: it must be signed"),
    ):
        client.query(_request())


def test_the_stores_own_readers_present_the_servers_own_certificate(
    served: Callable[..., StoreServer], pki: Pki
) -> None:
    server = served(tls_client_ca=pki.ca)
    path = os.path.join(server.store.path, CREDENTIALS_FILE)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    credentials = read_credentials(server.store.path)
    assert credentials is not None and credentials.mutual_tls
    assert credentials.tls_client_key is not None and credentials.tls_client_cert != pki.client
    for client in (connect(server.store.path), connect_to_owner(server.store.path)):
        assert client is not None
        with client:
            assert _value(client) == b"v"
    # That certificate is this server's: another server of the same CA refuses it.
    other = served("other", tls_client_ca=pki.ca)
    with (
        StoreClient.from_credentials(other.location, credentials) as client,
        pytest.raises(TlsHandshakeError, match="refused this client's"),
    ):
        client.describe()
    # A plan carries it (pickled), with the token.
    import pickle

    assert pickle.loads(pickle.dumps(credentials)) == credentials
    assert ServeCredentials.from_dict(credentials.to_dict()) == credentials
    assert "BEGIN" not in repr(credentials) and credentials.token not in repr(credentials)


def test_require_client_cert_alone_accepts_the_servers_own_certificate_only(
    served: Callable[..., StoreServer], pki: Pki
) -> None:
    server = served(require_client_cert=True)
    with server.client() as client:
        assert _value(client) == b"v"
    with (
        _client(server, pki) as client,
        pytest.raises(TlsHandshakeError, match="refused this client's"),
    ):
        client.describe()


def test_mutual_tls_needs_tls(make_store: MakeStore, pki: Pki) -> None:
    store = make_store()
    for kwargs in ({"tls_client_ca": pki.ca}, {"require_client_cert": True}):
        with pytest.raises(ServerConfigError, match=r"mutual TLS needs TLS.*serveTlsClientCa"):
            StoreServer(store, **kwargs)
    with pytest.raises(ServerConfigError, match="tls_client_ca: not PEM"):
        StoreServer(store, tls_certificates=(pki.server, pki.server_key), tls_client_ca=b"not a CA")


def test_a_client_certificate_needs_its_key(pki: Pki) -> None:
    location = "grpc+tls://127.0.0.1:1"
    with pytest.raises(ServerConfigError, match="go together"):
        StoreClient(location, tls_client_cert=pki.client)
    with pytest.raises(ServerConfigError, match="not the key of the"):
        StoreClient(location, tls_client_cert=pki.client, tls_client_key=pki.stranger_key)
    with pytest.raises(ServerConfigError, match="the certificate is not PEM"):
        StoreClient(location, tls_client_cert=b"junk", tls_client_key=pki.client_key)
    with pytest.raises(ServerConfigError, match="only with a location"):
        connect("/some/store", tls_client_cert=pki.client, tls_client_key=pki.client_key)


def test_the_option_files_are_read_and_checked(pki: Pki, tmp_path: Any) -> None:
    assert read_client_identity(
        pki.file("client"), pki.file("client_key"), cert_option="--c", key_option="--k"
    ) == (pki.client, pki.client_key)
    assert read_client_identity(None, None, cert_option="--c", key_option="--k") is None
    with pytest.raises(OptionError, match="options --c and --k go together"):
        read_client_identity(pki.file("client"), None, cert_option="--c", key_option="--k")
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(OptionError, match=re.escape(f"option --k: cannot read {missing}")):
        read_client_identity(pki.file("client"), missing, cert_option="--c", key_option="--k")
    with pytest.raises(OptionError, match=r"not the key of the.*stranger_key\.pem"):
        read_client_identity(
            pki.file("client"), pki.file("stranger_key"), cert_option="--c", key_option="--k"
        )
    assert read_client_ca(pki.file("ca"), "--ca") == pki.ca
    with pytest.raises(OptionError, match=r"option --ca: not PEM certificates .*client_key\.pem"):
        read_client_ca(pki.file("client_key"), "--ca")


def test_an_untrusted_server_certificate_is_told_apart(
    served: Callable[..., StoreServer], pki: Pki
) -> None:
    server = served()  # no mutual TLS
    wrong_roots = pki.stranger  # not the server's CA
    with (
        StoreClient(server.location, token=server.token, tls_root_certs=wrong_roots) as client,
        pytest.raises(TlsHandshakeError, match="does not trust the server's certificate"),
    ):
        client.describe()


def test_a_stopped_server_is_unavailable_not_a_handshake_failure(
    served: Callable[..., StoreServer], pki: Pki
) -> None:
    server = served(tls_client_ca=pki.ca)
    server.close()  # its location stays known: nothing listens there now
    with _client(server, pki, timeout_s=5) as client, pytest.raises(ServerUnavailableError) as info:
        client.describe()
    assert not isinstance(info.value, TlsHandshakeError)


def test_a_certificate_the_plugin_makes_comes_with_mutual_tls(
    served: Callable[..., StoreServer], pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_statestore.connectors.spark.serve_options import serving_endpoint

    # Executors elsewhere and no serveTlsCert: the server makes its own certificate, which
    # only the store's own readers (its credentials file, the plans made from it) can verify.
    monkeypatch.setenv("SPARK_STATESTORE_EXECUTORS", "remote")
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    endpoint = serving_endpoint(None, tls_cert=None, tls_key=None, tls_client_ca=None)
    assert endpoint.host == "127.0.0.1" and endpoint.tls_certificates is not None
    assert endpoint.require_client_cert and endpoint.tls_client_ca is None
    server = served(
        host=endpoint.host,
        tls_certificates=endpoint.tls_certificates,
        require_client_cert=endpoint.require_client_cert,
    )
    with connect(server.store.path) as client:
        assert _value(client) == b"v"
    server_cert = endpoint.tls_certificates[0]
    with (
        StoreClient(server.location, token=server.token, tls_root_certs=server_cert) as client,
        pytest.raises(TlsHandshakeError, match="presented none"),
    ):
        client.describe()
    # With the user's certificate and CA, the user's CA decides (and the server's own).
    given = serving_endpoint(
        None,
        tls_cert=pki.file("server"),
        tls_key=pki.file("server_key"),
        tls_client_ca=pki.file("ca"),
    )
    assert given.tls_certificates == (pki.server, pki.server_key)
    assert given.tls_client_ca == pki.ca and not given.require_client_cert


def test_the_sinks_store_server_in_mutual_tls_takes_its_own_commits(
    pki: Pki, tmp_path: Any
) -> None:
    import pyarrow as pa

    from spark_statestore.connectors.spark.leader.server import (
        ACTION_COMMIT,
        LeaderServer,
        batch_to_json,
        read_server_record,
    )
    from spark_statestore.connectors.spark.options import parse_sink_options
    from spark_statestore.sink.commit import BatchToCommit, CommitOutcome
    from spark_statestore.sink.staging import StagingArea, staged_schema

    path = tmp_path / "store"
    options = {
        "path": str(path),
        "serve": "true",
        "serveTlsCert": pki.file("server"),
        "serveTlsKey": pki.file("server_key"),
        "serveTlsClientCa": pki.file("ca"),
    }
    server = LeaderServer(parse_sink_options(options, streaming=False))
    try:
        assert server.server.mutual_tls and server.location.startswith("grpc+tls://")
        rows = {"key": [b"a"], "value": [b"1"]}
        columns = {f.name: rows.get(f.name, [None]) for f in staged_schema()}
        records = pa.RecordBatch.from_pydict(columns, schema=staged_schema())
        staged = StagingArea(path).stage("app", 0, 0, 0, [records])
        record = read_server_record(str(path))
        assert record is not None
        batch = batch_to_json(BatchToCommit("app", 0, [staged], None, False))
        body = {"secret": record.secret, "fingerprint": record.fingerprint, **batch}
        # The sink's commit processes reach it through the store's credentials file.
        with connect(path) as client:
            assert client.call(ACTION_COMMIT, body)["outcome"] == CommitOutcome.COMMITTED.value
        credentials = read_credentials(str(path))
        assert credentials is not None
        with (
            StoreClient(server.location, token=credentials.token, tls_root_certs=pki.ca) as bare,
            pytest.raises(TlsHandshakeError, match="presented none"),
        ):
            bare.describe()
    finally:
        server.close()
