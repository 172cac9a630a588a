"""A real schema registry as a local JVM process on loopback: Apicurio Registry, whose
Confluent-compatible API (:attr:`LocalSchemaRegistry.url`, ``.../apis/ccompat/v7``) is the
one Confluent's own clients and serdes talk to.

``make setup`` unpacks the server Apicurio publishes, already built by Quarkus, into
``interop/schema-registry/target/quarkus-app``; nothing is downloaded here. Apicurio 3.3 is
compiled for Java 21, so its JVM is a Java 21+ (:func:`find_registry_java`), not
necessarily the Java 17 that Kafka and Spark run on.

Storage is Apicurio's default, H2 in memory: a :meth:`~LocalSchemaRegistry.restart` after
:meth:`~LocalSchemaRegistry.kill` comes back empty. Given a ``data_dir``, the registry keeps
an H2 file there instead, written through at every commit, so what a client saw registered
survives a SIGKILL.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from spark_statestore.connectors.local.errors import LocalRegistryError, LocalRegistryStartError
from spark_statestore.connectors.local.processes import (
    LoggedProcess,
    free_ports,
    launch,
    owned_tempdir,
    port_taken,
    remove_stale_tempdirs,
)

__all__ = [
    "APICURIO_VERSION",
    "LocalRegistryError",
    "LocalRegistryStartError",
    "LocalSchemaRegistry",
    "find_registry_java",
    "schema_registry_app_dir",
]

log = logging.getLogger(__name__)

APICURIO_VERSION = "3.3.3"
"""The Apicurio Registry that ``interop/schema-registry/pom.xml`` unpacks."""
MIN_JAVA = 21
DEFAULT_HEAP = "512m"
ENV_APP = "SPARK_STATESTORE_SCHEMA_REGISTRY_APP"
ENV_JAVA_HOME = "SPARK_STATESTORE_SCHEMA_REGISTRY_JAVA_HOME"
ENV_HEAP = "SPARK_STATESTORE_SCHEMA_REGISTRY_HEAP"
_OWNER = "registry"
_START_ATTEMPTS = 3
_STOP_TIMEOUT_S = 30.0
_JVM_ROOT = Path("/usr/lib/jvm")


def schema_registry_app_dir() -> Path:
    """Where the built server is: ``$SPARK_STATESTORE_SCHEMA_REGISTRY_APP`` or the
    checkout's ``interop/schema-registry/target/quarkus-app``."""
    override = os.environ.get(ENV_APP)
    if override:
        return Path(override).expanduser()
    root = Path(__file__).resolve().parents[2]
    return root / "interop" / "schema-registry" / "target" / "quarkus-app"


def _java_major(home: Path) -> int:
    """The feature version a JDK's ``release`` file names (0 when unknown)."""
    try:
        text = (home / "release").read_text(errors="replace")
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("JAVA_VERSION="):
            version = line.partition("=")[2].strip().strip('"')
            head = version.split(".")[1 if version.startswith("1.") else 0]
            return int(head) if head.isdigit() else 0
    return 0


def find_registry_java() -> Path:
    """The ``java`` of a Java 21+ installation: ``$SPARK_STATESTORE_SCHEMA_REGISTRY_JAVA_HOME``,
    ``$JAVA_HOME``, the ``java`` on PATH, else the newest under ``/usr/lib/jvm``.

    Raises
    ------
    LocalRegistryError
        None of them is Java 21 or newer; the message says what was found.
    """
    homes = [
        Path(os.environ[name]) for name in (ENV_JAVA_HOME, "JAVA_HOME") if os.environ.get(name)
    ]
    on_path = shutil.which("java")
    if on_path:
        homes.append(Path(on_path).resolve().parent.parent)
    if _JVM_ROOT.is_dir():
        homes += sorted(_JVM_ROOT.iterdir(), key=_java_major, reverse=True)
    for home in homes:
        if _java_major(home) >= MIN_JAVA and (home / "bin" / "java").is_file():
            return home / "bin" / "java"
    found = ", ".join(f"{home} ({_java_major(home) or '?'})" for home in homes) or "none"
    raise LocalRegistryError(
        f"Apicurio Registry {APICURIO_VERSION} needs Java {MIN_JAVA} or newer; found: {found}. "
        f"Install one (e.g. a Temurin 21 or 25) and set {ENV_JAVA_HOME} to it"
    )


class LocalSchemaRegistry(LoggedProcess):
    """Apicurio Registry in a child JVM on ``host``, with a Confluent-compatible API.

    Parameters
    ----------
    host
        Address it listens on (loopback by default); the HTTP and management ports are free
        ports picked at :meth:`start` and kept across :meth:`restart`.
    data_dir
        Keep the registry's H2 database and log here: schemas survive :meth:`kill` and
        :meth:`restart`. Default: H2 in memory and a temporary folder for the log, removed
        by :meth:`close`; a restart then starts with no schemas.
    heap
        JVM heap (``-Xmx``), default ``$SPARK_STATESTORE_SCHEMA_REGISTRY_HEAP`` or 512m.
    config
        Extra Apicurio/Quarkus settings, passed as system properties: e.g.
        ``{"apicurio.rules.global.compatibility": "BACKWARD"}`` for Confluent's default
        global compatibility (Apicurio's is NONE).
    start_timeout_s
        How long :meth:`start` and :meth:`restart` wait for the readiness check.
    tls_cert_file, tls_key_file
        PEM certificate (chain) and private key: serve HTTPS only (the registry's own
        TLS, Quarkus'), as a registry behind TLS is deployed; clients then need its CA
        (``ssl.ca.location``).
    users
        ``{user: password}``: every API call needs HTTP basic auth of one of them (Quarkus'
        embedded users, each with Apicurio's admin role); None: no authentication.

    Examples
    --------
    >>> with LocalSchemaRegistry() as registry:                    # doctest: +SKIP
    ...     client = SchemaRegistryClient({"url": registry.url})
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        data_dir: str | Path | None = None,
        heap: str | None = None,
        config: Mapping[str, str] | None = None,
        start_timeout_s: float = 120.0,
        tls_cert_file: str | Path | None = None,
        tls_key_file: str | Path | None = None,
        users: Mapping[str, str] | None = None,
    ) -> None:
        if (tls_cert_file is None) != (tls_key_file is None):
            raise LocalRegistryError("give both tls_cert_file and tls_key_file, or neither")
        self.process: subprocess.Popen[bytes] | None = None
        self._host = host
        self._keep = data_dir is not None
        self._root = Path(data_dir) if data_dir is not None else None
        self._heap = heap or os.environ.get(ENV_HEAP) or DEFAULT_HEAP
        self._extra = dict(config or {})
        self._start_timeout_s = start_timeout_s
        self._tls = None
        if tls_cert_file is not None and tls_key_file is not None:
            self._tls = (Path(tls_cert_file), Path(tls_key_file))
        self._users = dict(users or {})
        self._ports: list[int] = []
        self._command: list[str] = []
        self._closed = False

    # -- facts ----------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """``http://host:port`` (``https://`` with TLS) of the registry's HTTP API."""
        self._require_started()
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://{self._host}:{self._ports[0]}"

    @property
    def url(self) -> str:
        """The Confluent-compatible API: what Confluent clients take as their ``url``."""
        return f"{self.base_url}/apis/ccompat/v7"

    @property
    def log_path(self) -> Path:
        """Where the JVM's output goes (appended to across restarts)."""
        if self._root is None:
            raise LocalRegistryError("the schema registry is not started: call start()")
        return self._root / "registry.log"

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> LocalSchemaRegistry:
        """Start the registry and wait until its readiness check answers UP.

        Raises
        ------
        LocalRegistryError
            The server is not built (run ``make setup``) or no Java 21+ was found.
        LocalRegistryStartError
            It exited or was not ready in time; the message has its log's end.
        """
        if self.process is not None:
            raise LocalRegistryError("this LocalSchemaRegistry was started already")
        app = schema_registry_app_dir()
        if not (app / "app" / f"apicurio-registry-app-{APICURIO_VERSION}.jar").is_file():
            raise LocalRegistryError(
                f"Apicurio Registry {APICURIO_VERSION} is not built in {app}: run `make setup` "
                "in the checkout, or `mvn -B -q -f interop/schema-registry/pom.xml package`"
            )
        java = find_registry_java()
        if self._root is None:
            remove_stale_tempdirs("schema-registry", _OWNER)
            self._root = owned_tempdir("schema-registry", f"{_OWNER}{os.getpid()}")
        self._root.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, _START_ATTEMPTS + 1):
            self._ports = free_ports(self._host, 2)
            self._command = self._java_command(java, app)
            try:
                self._launch()
                break
            except LocalRegistryStartError as exc:
                self.kill()
                if not exc.port_taken or attempt == _START_ATTEMPTS:
                    self.close()
                    raise
                log.info("a port was taken while the schema registry started; new ports")
            except BaseException:
                self.close()
                raise
        log.info("local Apicurio Registry %s up: %s", APICURIO_VERSION, self.url)
        return self

    def stop(self, timeout_s: float = _STOP_TIMEOUT_S) -> None:
        """SIGTERM the registry (Quarkus shuts down cleanly); SIGKILL after ``timeout_s``."""
        if not self.is_running():
            return
        assert self.process is not None
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("the schema registry did not stop in %.0f s; killing it", timeout_s)
            self.kill()

    def restart(self) -> None:
        """Start a stopped or killed registry again on the same ports and storage.

        In memory (no ``data_dir``) it comes back empty: every schema and id is gone.
        """
        self._require_started()
        if self.is_running():
            raise LocalRegistryError(f"the schema registry is still running (pid {self.pid})")
        self._launch()

    def close(self) -> None:
        """Stop the registry and remove its temporary folder. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._keep:
            self.stop()
        else:
            self.kill()  # its storage is deleted next: nothing is worth a clean shutdown
            if self._root is not None:
                shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> LocalSchemaRegistry:
        return self.start() if self.process is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------
    def _require_started(self) -> None:
        if not self._ports:
            raise LocalRegistryError("the schema registry is not started: call start()")

    def _java_command(self, java: Path, app: Path) -> list[str]:
        assert self._root is not None
        settings = {
            "quarkus.http.host": self._host,
            "quarkus.http.port": str(self._ports[0]),
            "quarkus.management.host": self._host,
            "quarkus.management.port": str(self._ports[1]),
            "apicurio.storage.snapshot.location": str(self._root),
            "java.util.logging.manager": "org.jboss.logmanager.LogManager",
        }
        if self._keep:
            # WRITE_DELAY=0: H2 writes each commit through, so an id a client got back
            # is still there after a SIGKILL (by default H2 flushes about once a second).
            h2_file = self._root / "h2" / "registry"
            settings["apicurio.datasource.url"] = f"jdbc:h2:file:{h2_file};WRITE_DELAY=0"
        if self._tls is not None:
            cert, key = self._tls
            settings["quarkus.http.ssl-port"] = str(self._ports[0])
            settings["quarkus.http.ssl.certificate.files"] = str(cert)
            settings["quarkus.http.ssl.certificate.key-files"] = str(key)
            settings["quarkus.http.insecure-requests"] = "disabled"
        if self._users:
            settings["quarkus.http.auth.basic"] = "true"
            settings["quarkus.security.users.embedded.enabled"] = "true"
            settings["quarkus.security.users.embedded.plain-text"] = "true"
            for user, password in self._users.items():
                settings[f"quarkus.security.users.embedded.users.{user}"] = password
                settings[f"quarkus.security.users.embedded.roles.{user}"] = "sr-admin"
            settings["quarkus.http.auth.permission.apis.paths"] = "/apis/*"
            settings["quarkus.http.auth.permission.apis.policy"] = "authenticated"
        settings.update(self._extra)
        return [
            str(java),
            f"-Xmx{self._heap}",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            *(f"-D{name}={value}" for name, value in settings.items()),
            "-jar",
            str(app / "quarkus-run.jar"),
        ]

    def _launch(self) -> None:
        assert self._root is not None
        try:
            self.process = launch(self._command, self.log_path, cwd=self._root)
        except OSError as exc:
            raise LocalRegistryStartError(f"could not start the schema registry: {exc}") from exc
        self._wait_until_ready(self._start_timeout_s)

    def _wait_until_ready(self, timeout_s: float) -> None:
        """Poll the readiness check until it answers 200 and the API's port takes
        connections (the management port can answer first); each probe waits up to a
        second for its answer, and a registry that exits ends the wait at once with its
        log."""
        assert self.process is not None
        ready_url = f"http://{self._host}:{self._ports[1]}/health/ready"  # management port
        # Loopback is never reached through a proxy, whatever http_proxy says.
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        while True:
            if self.process.poll() is not None:
                raise self._start_error()
            try:
                with direct.open(ready_url, timeout=1.0) as answer:
                    if answer.status == 200 and self._api_listens():
                        return
                    last = f"HTTP {answer.status}, API port {self._ports[0]} not listening"
            except urllib.error.HTTPError as exc:  # 503 while a check is DOWN
                last = f"HTTP {exc.code}"
            except OSError as exc:  # refused while the JVM starts
                last = str(exc)
            if time.monotonic() > deadline:
                self.kill()
                raise LocalRegistryStartError(
                    f"the schema registry was not ready within {timeout_s:.0f} s ({last} from "
                    f"{ready_url}); {self.log_path} ends with:\n{self.log_tail()}"
                )
            threading.Event().wait(0.1)

    def _api_listens(self) -> bool:
        try:
            with socket.create_connection((self._host, self._ports[0]), timeout=1.0):
                return True
        except OSError:
            return False

    def _start_error(self) -> LocalRegistryStartError:
        tail = self.log_tail()
        code = self.process.returncode if self.process is not None else None
        if port_taken(tail):
            return LocalRegistryStartError(
                f"the schema registry could not listen on {self._host}:{self._ports}: a port "
                "is taken by another process",
                port_taken=True,
            )
        return LocalRegistryStartError(
            f"the schema registry exited with code {code} while starting; {self.log_path} "
            f"ends with:\n{tail}"
        )
