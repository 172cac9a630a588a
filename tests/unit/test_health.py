"""Health: a follower's state and reason, the ``describe`` action's health, the metrics
endpoint's ``/health`` (status codes, token, TLS) and ``spark-statestore status`` against a
store on disk and one served in this process (no JVM, no broker)."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import Counter
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from spark_statestore.cli.main import main
from spark_statestore.errors import FollowerError, OptionError, StateStoreError
from spark_statestore.follower import Follower, PollResult
from spark_statestore.health import NOT_OPEN, Health, HealthState, served
from spark_statestore.metrics import MetricsServer
from spark_statestore.serve import StoreServer
from spark_statestore.serve.errors import BadRequestError
from spark_statestore.serve.protocol import DescribeReply
from spark_statestore.store import Role, Store, StoreSpec
from tests.unit.test_follower_positions import TOPIC, FakeChangelog

TOKEN = "metrics-token-0123456789"


def test_health_round_trips_and_refuses_what_is_not_one() -> None:
    health = Health(HealthState.RESTORING, "3 to go", 12.5, {"restore_remaining_records": 3})
    assert Health.from_dict(json.loads(json.dumps(health.to_dict()))) == health
    assert HealthState.RUNNING.healthy and not HealthState.RESTORING.healthy
    for bad in ({"state": "ASLEEP", "since": 1}, {"state": "RUNNING"}, {"since": 1.0}):
        with pytest.raises(StateStoreError, match="not a health object"):
            Health.from_dict(bad)
    with pytest.raises(StateStoreError, match="reason 7 is not a string"):
        Health.from_dict({"state": "RUNNING", "since": 1, "reason": 7})
    started = served("spark-statestore serve", "2026-11-28T10:00:00+00:00")
    assert started.state is HealthState.RUNNING and started.since == 1795860000.0
    assert "spark-statestore serve" in (started.reason or "")


class BrokenChangelog(FakeChangelog):
    """A changelog whose next poll fails as Kafka refusing would (an expected failure)."""

    def poll(self, max_records: int, timeout_s: float, *, fill: bool = True) -> PollResult:
        if not self._polls:
            raise StateStoreError(f"changelog {TOPIC!r} partition 0: the broker refused\nus")
        return super().poll(max_records, timeout_s, fill=fill)


def test_a_followers_health_follows_its_states_with_reasons(make_store: Any) -> None:
    store = make_store(role=Role.FOLLOWER, topic=TOPIC, partitions=2, store_name="store")
    source = BrokenChangelog()
    source.ends = {0: 2, 1: 1}
    follower = Follower(store, source)
    created = follower.health()
    assert created.state is HealthState.CREATED and created.reason is None

    follower.start_restore()
    restoring = follower.health()
    assert restoring.state is HealthState.RESTORING
    assert restoring.details["restore_remaining_records"] == 3
    assert "3 record(s) to go" in (restoring.reason or "") and TOPIC in (restoring.reason or "")
    assert "last_commit_at" not in restoring.details

    source.feed([(b"a", b"1", 0, 0, -1), (b"b", b"2", 0, 1, -1), (b"c", b"3", 1, 0, -1)])
    before = time.time()
    follower.step()
    running = follower.health()
    assert running.state is HealthState.RUNNING and running.reason is None
    assert running.since >= before and running.details["records_applied"] == 3
    assert running.details["last_commit_at"] >= before

    follower.start()  # the next poll fails on the follower's thread
    with pytest.raises(FollowerError, match="failed"):
        follower.wait_for(lambda _offsets: False, 30.0)
    failed = follower.health()
    assert failed.state is HealthState.FAILED
    assert failed.reason == f"changelog {TOPIC!r} partition 0: the broker refused us"
    follower.stop()
    assert follower.health().state is HealthState.FAILED  # a stop keeps the failure


def test_a_stopped_follower_says_so(make_store: Any) -> None:
    store = make_store(role=Role.FOLLOWER, topic=TOPIC, partitions=1, store_name="store")
    follower = Follower(store, FakeChangelog(partitions=1))
    follower.start_restore()
    follower.stop()
    stopped = follower.health()
    assert stopped.state is HealthState.STOPPED and "stopped" in (stopped.reason or "")


def test_describe_carries_the_owners_health(tmp_path: Path) -> None:
    health = Health(HealthState.FAILED, "the broker refused us", 5.0)
    spec = StoreSpec(Role.LEADER, None, 1, "c")
    with Store.open(tmp_path / "s", spec, purpose="test", serves=True) as store:
        with StoreServer(store, health_provider=lambda: health) as server, server.client() as c:
            assert c.describe().health == health
        with StoreServer(store) as server, server.client() as c:
            assert c.describe().health is None  # no provider: none reported


def _describe_dict(store: Store) -> dict[str, Any]:
    with StoreServer(store) as server, server.client() as client:
        return client.describe().to_dict()


def test_a_malformed_health_in_a_describe_reply_is_refused(tmp_path: Path) -> None:
    spec = StoreSpec(Role.LEADER, None, 1, "c")
    with Store.open(tmp_path / "s", spec, purpose="test", serves=True) as store:
        good = _describe_dict(store)
    assert DescribeReply.from_dict(good).health is None  # a server without a provider
    older = {name: value for name, value in good.items() if name != "health"}
    assert DescribeReply.from_dict(older).health is None  # an older server: no field at all
    with pytest.raises(BadRequestError, match="the describe reply's health: not a health"):
        DescribeReply.from_dict({**good, "health": {"state": "ASLEEP", "since": 1}})


def _get(url: str, *, token: str | None = None, context: Any = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    handlers: list[Any] = [urllib.request.ProxyHandler({})]  # loopback, never a proxy
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    try:
        with urllib.request.build_opener(*handlers).open(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_health_endpoint_answers_200_only_when_every_store_runs() -> None:
    registry = CollectorRegistry()
    Counter("probe_total", "a probe", registry=registry).inc(3)
    states = {"a": Health(HealthState.RUNNING), "b": Health(HealthState.RUNNING)}
    with MetricsServer(registry, health={"/s/a": lambda: states["a"]}) as server:
        server.add_health("/s/b", lambda: states["b"])
        code, body = _get(server.health_url)
        report = json.loads(body)
        assert code == 200 and report["status"] == "UP"
        assert sorted(report["stores"]) == ["/s/a", "/s/b"]
        states["b"] = Health(HealthState.RESTORING, "5 record(s) to go")
        code, body = _get(server.health_url)
        report = json.loads(body)
        assert code == 503 and report["status"] == "DOWN"
        assert report["stores"]["/s/b"]["reason"] == "5 record(s) to go"

        def broken() -> Health:
            raise RuntimeError("store closed")

        server.add_health("/s/c", broken)
        states["b"] = Health(HealthState.RUNNING)
        code, body = _get(server.health_url)
        unknown = json.loads(body)["stores"]["/s/c"]
        assert code == 503 and unknown["state"] == "UNKNOWN" and "store closed" in unknown["reason"]

        code, body = _get(server.url)
        assert code == 200
        families = {f.name: f for f in text_string_to_metric_families(body.decode())}
        assert families["probe"].samples[0].value == 3.0
        assert _get(server.url.replace("/metrics", "/nothing"))[0] == 404


def test_the_endpoint_takes_a_token_and_tls_and_needs_both_beyond_loopback(pki: Any) -> None:
    registry = CollectorRegistry()
    with MetricsServer(registry, token=TOKEN) as server:
        assert _get(server.url)[0] == 401
        assert _get(server.url, token="wrong-token-0123456789")[0] == 401
        assert _get(server.url, token=TOKEN)[0] == 200
        assert _get(server.health_url, token=TOKEN)[0] == 200

    with MetricsServer(
        registry,
        tls_cert_file=pki.file("server"),
        tls_key_file=pki.file("server_key"),
        token=TOKEN,
    ) as server:
        assert server.url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=pki.file("ca"))
        assert _get(server.url, token=TOKEN, context=context)[0] == 200
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            _get(server.url, token=TOKEN, context=ssl.create_default_context())

    for kwargs, message in (
        ({}, "beyond loopback: it must use TLS and a bearer token"),
        ({"token": TOKEN}, "beyond loopback: it must use TLS and a bearer token"),
        ({"tls_cert_file": pki.file("server")}, "needs both a certificate and a key file"),
    ):
        with pytest.raises(OptionError, match=message):
            MetricsServer(registry, host="0.0.0.0", **kwargs)
    with pytest.raises(OptionError, match="metrics token"):
        MetricsServer(registry, token="short")
    with pytest.raises(OptionError, match="cannot load the metrics endpoint's certificate"):
        MetricsServer(registry, tls_cert_file=pki.file("ca"), tls_key_file=pki.file("ca"))


def test_status_of_a_store_nobody_has_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "counts"
    with (
        Store.open(path, StoreSpec(Role.LEADER, "counts-changelog", 2, "c"), purpose="t") as store,
        store.begin() as txn,
    ):
        txn.put(b"k", b"v", source=("in", 0, 4))
        txn.set_changelog_offset(1, 7)
    assert main(["status", str(path)]) == 3
    out = capsys.readouterr().out
    assert "STOPPED\n" in out and NOT_OPEN in out and "#1" in out
    lines = out.splitlines()
    table = lines[lines.index(next(x for x in lines if x.startswith("PARTITION"))) :]
    assert [row.split() for row in table[1:3]] == [["0", "0", "-", "-"], ["1", "7", "-", "-"]]
    assert "end offsets unknown: give --bootstrap-servers" in out

    assert main(["status", str(path), "--json"]) == 3
    report = json.loads(capsys.readouterr().out)
    assert report["health"]["state"] == "STOPPED" and report["owner"] is None
    assert report["description"]["changelog_offsets"] == {"1": 7}


def test_status_of_a_served_store_reports_its_owners_health(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "counts"
    spec = StoreSpec(Role.LEADER, None, 1, "c")
    health = {"now": Health(HealthState.RESTORING, "12 record(s) to go", time.time() - 75)}
    with Store.open(path, spec, purpose="unit test", serves=True) as store:
        with StoreServer(store, health_provider=lambda: health["now"]):
            assert main(["status", str(path)]) == 3
            out = capsys.readouterr().out
            assert "RESTORING since" in out and "(1m 15s ago)" in out
            assert "12 record(s) to go" in out and "live: pid" in out
            health["now"] = Health(HealthState.RUNNING, None, time.time(), {"last_commit_at": 1})
            assert main(["status", str(path), "--json"]) == 0
            report = json.loads(capsys.readouterr().out)
            assert report["health"]["state"] == "RUNNING" and report["owner"]["live"]
        with StoreServer(store):  # a server with no health of its own: it serves, so RUNNING
            assert main(["status", str(path)]) == 0
            assert "served by unit test" in capsys.readouterr().out


def test_status_takes_one_of_a_store_and_a_changelog(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status"]) == 2
    assert "give one of STORE and --changelog" in capsys.readouterr().err
    assert main(["status", "--changelog", "t"]) == 2
    assert "give --bootstrap-servers" in capsys.readouterr().err


def test_the_metrics_flags_go_with_a_port_and_tls_beyond_loopback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "counts"
    Store.open(path, StoreSpec(Role.LEADER, None, 1, "c"), purpose="t").close()
    assert main(["serve", str(path), "--metrics-token-file", "t"]) == 2
    err = capsys.readouterr().err
    assert "--metrics-token-file: only with --metrics-port" in err and err.count("\n") == 1
    assert main(["serve", str(path), "--metrics-port", "0", "--metrics-host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "beyond loopback: it must use TLS and a bearer token" in err
    assert "Traceback" not in err and err.count("\n") == 1
