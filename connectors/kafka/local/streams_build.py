"""Which build of the interop Kafka Streams app runs (:mod:`.streams_app`), and against which
Kafka Streams: the pinned :data:`~spark_statestore.connectors.kafka.local.jars.KAFKA_VERSION`
built by the setup into ``interop/kafka-streams/target/``, or the version
``$SPARK_STATESTORE_STREAMS_VERSION`` names, which ``make compat`` builds into
``target-<version>/`` (before 4.3 without ``HeadersApp``: :func:`has_headers_stores`).
"""

from __future__ import annotations

import os
from pathlib import Path

from spark_statestore.connectors.kafka.errors import JarsMissingError
from spark_statestore.connectors.kafka.local.jars import KAFKA_VERSION

__all__ = [
    "APP_JAR",
    "ENV_APP",
    "ENV_STREAMS_VERSION",
    "app_classpath",
    "has_headers_stores",
    "interop_app_dir",
    "streams_version",
]

ENV_APP = "SPARK_STATESTORE_INTEROP_APP"
ENV_STREAMS_VERSION = "SPARK_STATESTORE_STREAMS_VERSION"
APP_JAR = "spark-statestore-interop.jar"
"""The app's own jar in a build directory (its libraries are in ``lib/``)."""


def streams_version() -> str:
    """The Kafka Streams version the app is built against: ``$SPARK_STATESTORE_STREAMS_VERSION``
    or :data:`~spark_statestore.connectors.kafka.local.jars.KAFKA_VERSION`."""
    return os.environ.get(ENV_STREAMS_VERSION) or KAFKA_VERSION


def has_headers_stores(version: str | None = None) -> bool:
    """Whether Kafka Streams ``version`` (default: :func:`streams_version`) has header-aware
    stores (4.3 and later), so the app's build holds ``HEADERS_APP``."""
    major, minor = (int(part) for part in (version or streams_version()).split(".")[:2])
    return (major, minor) >= (4, 3)


def interop_app_dir(version: str | None = None) -> Path:
    """Where the built app is: ``$SPARK_STATESTORE_INTEROP_APP``, else the checkout's
    ``interop/kafka-streams/target`` (``target-<version>`` for a ``version``, by default
    ``$SPARK_STATESTORE_STREAMS_VERSION``, other than the pinned one)."""
    override = os.environ.get(ENV_APP)
    if override:
        return Path(override).expanduser()
    version = version or streams_version()
    name = "target" if version == KAFKA_VERSION else f"target-{version}"
    return Path(__file__).resolve().parents[3] / "interop" / "kafka-streams" / name


def app_classpath() -> str:
    """The app's jar and its libraries, for ``java -cp``.

    Raises
    ------
    JarsMissingError
        The app is not built for :func:`streams_version` where :func:`interop_app_dir` says;
        the message says how to build it.
    """
    target = interop_app_dir()
    version = streams_version()
    jar = target / APP_JAR
    libs = sorted((target / "lib").glob("*.jar")) if (target / "lib").is_dir() else []
    if not jar.is_file() or not any(p.name == f"kafka-streams-{version}.jar" for p in libs):
        build = "mvn -B -q -f interop/kafka-streams/pom.xml package"
        if version != KAFKA_VERSION:
            build += f" -Dkafka.version={version} -Dbuild.dir={target}"
        raise JarsMissingError(
            f"the Kafka Streams interop app is not built in {target} (for Kafka "
            f"{version}): run `make setup` in the checkout, or `{build}`"
        )
    return os.pathsep.join(str(p) for p in [jar, *libs])
