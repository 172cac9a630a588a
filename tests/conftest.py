"""Shared fixtures: a real local Kafka cluster, topic factories, one local SparkSession,
child-process helpers, a self-signed TLS certificate."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings as hypothesis_settings

import spark_statestore

# Performance is never asserted in tests: Hypothesis' default 200 ms deadline per example only
# fails property tests when the machine is busy (test_membership saw it once under load).
hypothesis_settings.register_profile("spark-statestore", deadline=None)
hypothesis_settings.load_profile("spark-statestore")

if TYPE_CHECKING:
    from spark_statestore.connectors.kafka.local import LocalKafkaCluster
    from spark_statestore.connectors.local import LocalSchemaRegistry

REPO_ROOT = Path(__file__).resolve().parent.parent
CHECKOUT_UNDER_TEST = Path(spark_statestore.__file__).resolve().is_relative_to(REPO_ROOT)
"""True when the package under test is this checkout's (the setup's editable install); false
when it is an installed wheel (``scripts/dist-check.sh`` hides the checkout's packages)."""
requires_checkout = pytest.mark.skipif(
    not CHECKOUT_UNDER_TEST,
    reason="checks the checkout's sources, not the installed package (scripts/dist-check.sh)",
)
CLUSTER_TESTS = REPO_ROOT / "tests" / "cluster"
"""Tests on a Spark standalone cluster: their driver is this process, and a process has one
SparkContext, so they run in a pytest process of their own (scripts/run-tests.sh runs it
second), collected only when named."""


def _names_cluster_tests(arg: str) -> bool:
    path = Path(arg.split("::", 1)[0]).resolve()
    return path == CLUSTER_TESTS or CLUSTER_TESTS in path.parents


def pytest_configure(config: pytest.Config) -> None:
    named = [_names_cluster_tests(arg) for arg in config.args]
    if any(named) and not all(named):
        raise pytest.UsageError(
            "tests/cluster runs in a pytest process of its own (its SparkSession is a "
            "cluster's driver, the other tests' a local one, and a process has one "
            "SparkContext): run `pytest tests/cluster` separately (scripts/run-tests.sh "
            "runs both)"
        )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave tests/cluster out unless the command line names it."""
    if collection_path != CLUSTER_TESTS:
        return None
    return not any(_names_cluster_tests(arg) for arg in config.args)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soak variants run only when asked for (``make soak``), never in CI's ``make test``."""
    if os.environ.get("SPARK_STATESTORE_SOAK") == "1":
        return
    skip = pytest.mark.skip(reason="soak variant: run it with `make soak`")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[LocalKafkaCluster]:
    """One real Apache Kafka node (KRaft, broker+controller) for the whole test session.

    Its topics keep every record however old its timestamp (tests write fixed timestamps
    from years ago, which the default 7-day retention would delete at once). Tests that
    stop, pause or kill brokers start clusters of their own.
    """
    from spark_statestore.connectors.kafka.local import LocalKafkaCluster

    with LocalKafkaCluster(brokers=1, config={"log.retention.ms": "-1"}) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[LocalSchemaRegistry]:
    """One real schema registry (Apicurio Registry, in memory) for the whole test session;
    clients take :attr:`~LocalSchemaRegistry.url`, its Confluent-compatible API. Tests that
    kill or restart a registry start one of their own."""
    from spark_statestore.connectors.local import LocalSchemaRegistry

    with LocalSchemaRegistry() as registry:
        yield registry


_topic_counter = itertools.count()


@pytest.fixture
def make_topic(
    kafka_broker: LocalKafkaCluster, request: pytest.FixtureRequest
) -> Callable[..., str]:
    """Factory: ``make_topic(partitions=1, suffix="", **create_topic_kwargs)`` creates a
    fresh, uniquely named topic.

    Not compacted unless asked for (``compacted=True``): tests read back exactly what they
    wrote, and with old record timestamps a real broker rolls segments at every append,
    so its log cleaner would soon remove overwritten records.
    """

    def factory(partitions: int = 1, suffix: str = "", **kwargs: Any) -> str:
        kwargs.setdefault("compacted", False)
        # Kafka allows ASCII letters, digits, ".", "_" and "-" in topic names.
        base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:60]
        name = f"{base}-{next(_topic_counter)}{suffix}"
        kafka_broker.create_topic(name, partitions, **kwargs)
        return name

    return factory


# Everything but the sources of the package (and nothing written into the work tree: the
# build runs on a copy, setuptools would leave build/ and egg-info behind).
NOT_PACKAGED = shutil.ignore_patterns(
    ".*", "build", "dist", "*.egg-info", "__pycache__", "tests", "docs", "scripts"
)


def pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="session")
def package_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built from the checkout (as ``make dist`` builds it), or the one
    under test (``$SPARK_STATESTORE_TEST_PACKAGE_WHEEL``, set by ``scripts/dist-check.sh``)."""
    given = os.environ.get("SPARK_STATESTORE_TEST_PACKAGE_WHEEL")
    if given:
        return Path(given)
    root = tmp_path_factory.mktemp("wheel")
    source, dist = root / "src", root / "dist"
    shutil.copytree(REPO_ROOT, source, ignore=NOT_PACKAGED)
    # Offline: the build backend comes from the venv, the dependencies are not needed.
    pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(source))
    wheels = list(dist.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="session")
def installed_package(package_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site directory holding a real (non-editable) install of the project's wheel.

    Spark registers ``spark_statestore`` by itself only from such an install: a plain
    editable install hides the top-level ``pyspark_statestore`` module from
    ``pkgutil.iter_modules`` (the setup adds a listable link; this install needs none).
    """
    site = tmp_path_factory.mktemp("site")
    pip("install", "--no-deps", "--no-index", "--target", str(site), str(package_wheel))
    assert (site / "pyspark_statestore" / "__init__.py").is_file()
    assert not list(site.glob("*.pth")), "the install must be a plain copy, not editable"
    return site


def run_python(
    code: str, *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (a separate process) and capture its output."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO_ROOT,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"child process failed with {proc.returncode}\nstdout:\n{proc.stdout}\n"
            f"stderr:\n{proc.stderr}"
        )
    return proc


def crash_file_path() -> Path:
    """The file a test writes a crash point's name into to SIGKILL (or stop, or hang) the
    driver-side process that reaches it next (see ``spark_statestore.store.crash``)."""
    import tempfile

    return Path(tempfile.gettempdir()) / f"sss-crash-{os.getpid()}"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A session-scoped local[2] SparkSession (UI off, 2 shuffle partitions, UTC); its
    driver-side processes (the sink's commit and store server) have the crash seam
    :func:`crash_file_path`."""
    import spark_statestore
    from spark_statestore.connectors.spark.session import local_session
    from spark_statestore.store.crash import CRASH_FILE

    # They inherit the driver JVM's environment, fixed when it starts, here.
    os.environ[CRASH_FILE] = str(crash_file_path())
    session = local_session("spark-statestore-tests")
    # Editable installs hide top-level modules from pkgutil, so Spark's automatic
    # registration (pyspark_statestore) only works from a real install; see
    # tests/integration/test_registration.py for that path.
    spark_statestore.register(session)
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def host_tools() -> None:
    """Skips, saying why, where this process cannot make local hosts (network namespaces on
    a bridge: root, ``ip``, ``unshare``)."""
    from spark_statestore.connectors.local import HostsUnavailableError, check_host_tools

    try:
        check_host_tools()
    except HostsUnavailableError as exc:
        pytest.skip(f"needs hosts of its own: {exc}")


def self_signed_certificate(directory: Path, names: list[str]) -> tuple[Path, Path]:
    """A self-signed certificate (``cert.pem``, ``key.pem`` in ``directory``) for the
    subject alternative ``names`` (``DNS:...``, ``IP:...``); skips without openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost", "-addext", f"subjectAltName={','.join(names)}",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[bytes, bytes]:
    """A self-signed certificate for this host's name (openssl)."""
    names = ["DNS:localhost", f"DNS:{socket.gethostname()}", "IP:127.0.0.1"]
    cert, key = self_signed_certificate(tmp_path, names)
    return cert.read_bytes(), key.read_bytes()


@pytest.fixture
def pki(tmp_path: Path) -> Any:
    """A fresh test PKI (:class:`tests.pki.Pki`): a CA, a server certificate for this host,
    a client certificate of the CA and one of another CA, as bytes and files."""
    from tests.pki import make_pki

    return make_pki(tmp_path / "pki")
