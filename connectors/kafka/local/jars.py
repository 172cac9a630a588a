"""The JVM jars the project runs: Apache Kafka's broker, Spark's Kafka connector, and
Hadoop's minicluster (the HDFS that tests put a query's checkpoint on).

Both come from Maven Central, resolved once by the setup (``spark-statestore jars``, which
``make setup`` runs) into a cache directory, and only read afterwards: starting a broker or a
Spark session never downloads anything. The Kafka version is pinned here, in
:data:`KAFKA_VERSION`, and nowhere else; the connector's version is the installed PySpark's.
``$SPARK_STATESTORE_BROKER_VERSION`` runs the local broker at another Kafka version (what
``make compat`` does to fill the README's compatibility table); unset, it is
:data:`KAFKA_VERSION`.

The cache lives in ``$SPARK_STATESTORE_JARS`` or ``~/.cache/spark-statestore/jars``; each jar
set gets its own directory (``kafka-4.3.1/``) holding the jars and a ``jars.txt`` manifest
written last, so a directory without its manifest is an interrupted resolution, not a cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from spark_statestore.connectors.kafka.errors import JarsMissingError, LocalKafkaError

__all__ = [
    "KAFKA_VERSION",
    "JarSet",
    "broker_version",
    "cache_root",
    "hdfs_minicluster_jars",
    "kafka_jars",
    "kafka_major",
    "resolve",
    "spark_avro_jars",
    "spark_kafka_jars",
]

KAFKA_VERSION = "4.3.1"
"""The Apache Kafka version of the local broker (and, later, the Kafka Streams peer)."""

_LOG4J_VERSION = "2.25.4"
"""log4j's version in Kafka 4.3.1's dependency tree: its slf4j binding must match it."""

_SLF4J_RELOAD4J_VERSION = "1.7.36"
"""slf4j's reload4j binding in Kafka 3.9's distribution (libs/), for a Kafka 3 broker."""

ENV_CACHE = "SPARK_STATESTORE_JARS"
ENV_BROKER_VERSION = "SPARK_STATESTORE_BROKER_VERSION"
_MANIFEST = "jars.txt"
_SETUP_HINT = "run `spark-statestore jars` (or `make setup` in a checkout) to resolve them"


def cache_root() -> Path:
    """The directory holding every resolved jar set."""
    override = os.environ.get(ENV_CACHE)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "spark-statestore" / "jars"


@dataclass(frozen=True)
class JarSet:
    """A named set of Maven artifacts with their runtime dependencies.

    Attributes
    ----------
    name
        Directory name prefix and what error messages call it (``kafka``).
    version
        The version that names the cache directory.
    coordinates
        ``group:artifact:version`` of each direct dependency.
    keep
        When not empty, only these artifact ids are kept (the rest is on the classpath of
        whatever loads the set, e.g. Spark's own jars).
    """

    name: str
    version: str
    coordinates: tuple[str, ...]
    keep: tuple[str, ...] = ()

    @property
    def directory(self) -> Path:
        """Where the set is cached."""
        return cache_root() / f"{self.name}-{self.version}"

    def is_resolved(self) -> bool:
        """True when the set's manifest is present (resolution finished)."""
        return (self.directory / _MANIFEST).is_file()

    def jars(self) -> list[Path]:
        """The cached jar files, in manifest order.

        Raises
        ------
        JarsMissingError
            The set was never resolved here, or a jar named by its manifest is gone.
        """
        manifest = self.directory / _MANIFEST
        if not manifest.is_file():
            raise JarsMissingError(
                f"the {self.name} {self.version} jars are not in {self.directory}: {_SETUP_HINT}"
            )
        paths = [self.directory / line for line in manifest.read_text().split() if line]
        missing = [p.name for p in paths if not p.is_file()]
        if missing or not paths:
            raise JarsMissingError(
                f"the {self.name} {self.version} jar cache in {self.directory} is incomplete "
                f"(missing {', '.join(missing[:3]) or 'every jar'}): delete it and {_SETUP_HINT}"
            )
        return paths

    def classpath(self) -> str:
        """The jars joined for ``java -cp``."""
        return os.pathsep.join(str(p) for p in self.jars())


def broker_version() -> str:
    """The Kafka version of the local broker: ``$SPARK_STATESTORE_BROKER_VERSION`` or
    :data:`KAFKA_VERSION`."""
    return os.environ.get(ENV_BROKER_VERSION) or KAFKA_VERSION


def kafka_major(version: str) -> int:
    """The major version of a Kafka version string (``3`` for ``3.9.2``)."""
    head = version.split(".", 1)[0]
    if not head.isdigit():
        raise LocalKafkaError(f"not a Kafka version: {version!r} (want e.g. 3.9.2 or 4.3.1)")
    return int(head)


def kafka_jars(version: str | None = None) -> JarSet:
    """Apache Kafka's server (KRaft broker and controller) of ``version`` (default:
    :func:`broker_version`) with a log4j binding for slf4j.

    Kafka 4 logs through log4j 2: its slf4j binding is added at the log4j version of 4.3.1's
    tree (for another 4.x version, with log4j's API and core pinned to it, so the three
    match). Kafka 3's distribution logs through reload4j, which its Maven dependencies do not
    bring: its binding is added at the version Kafka 3.9's distribution ships.
    """
    version = version or broker_version()
    binding = f"org.apache.logging.log4j:log4j-slf4j-impl:{_LOG4J_VERSION}"
    if version == KAFKA_VERSION:
        extra: tuple[str, ...] = (binding,)
    elif kafka_major(version) >= 4:
        extra = (
            f"org.apache.logging.log4j:log4j-api:{_LOG4J_VERSION}",
            f"org.apache.logging.log4j:log4j-core:{_LOG4J_VERSION}",
            binding,
        )
    else:
        extra = (f"org.slf4j:slf4j-reload4j:{_SLF4J_RELOAD4J_VERSION}",)
    return JarSet(
        name="kafka",
        version=version,
        coordinates=(f"org.apache.kafka:kafka_2.13:{version}", *extra),
    )


def spark_kafka_jars(spark_version: str | None = None) -> JarSet:
    """Spark's Kafka connector (``format("kafka")``) for ``spark_version`` (default: the
    installed PySpark), without the jars Spark already ships."""
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    return JarSet(
        name="spark-sql-kafka",
        version=spark_version,
        coordinates=(f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version}",),
        keep=(
            "spark-sql-kafka-0-10_2.13",
            "spark-token-provider-kafka-0-10_2.13",
            "kafka-clients",
            "commons-pool2",
        ),
    )


def spark_avro_jars(spark_version: str | None = None) -> JarSet:
    """Spark's own Avro functions (``from_avro``, ``to_avro``: the peer of the ``avro``
    formats in the bench) for ``spark_version`` (default: the installed PySpark), without
    the Avro jars Spark already ships."""
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    return JarSet(
        name="spark-avro",
        version=spark_version,
        coordinates=(f"org.apache.spark:spark-avro_2.13:{spark_version}",),
        keep=("spark-avro_2.13",),
    )


def hdfs_minicluster_jars(hadoop_version: str | None = None) -> JarSet:
    """Hadoop's minicluster (a NameNode and DataNodes in one JVM: a real HDFS for tests) of
    ``hadoop_version`` (default: the Hadoop client the installed PySpark ships). Only the
    shaded minicluster jar is kept: the rest of its classpath is PySpark's own jars."""
    if hadoop_version is None:
        hadoop_version = pyspark_hadoop_version()
    return JarSet(
        name="hadoop-client-minicluster",
        version=hadoop_version,
        coordinates=(f"org.apache.hadoop:hadoop-client-minicluster:{hadoop_version}",),
        keep=("hadoop-client-minicluster",),
    )


def pyspark_jars_directory() -> Path:
    """The jars PySpark ships (Spark's classpath)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def pyspark_hadoop_version() -> str:
    """The version of the Hadoop client jars the installed PySpark ships.

    Raises
    ------
    JarsMissingError
        PySpark ships no ``hadoop-client-api`` jar (a PySpark without Hadoop).
    """
    for jar in sorted(pyspark_jars_directory().glob("hadoop-client-api-*.jar")):
        return jar.name[len("hadoop-client-api-") : -len(".jar")]
    raise JarsMissingError(
        f"PySpark ships no hadoop-client-api jar in {pyspark_jars_directory()}: install "
        "pyspark from PyPI (it bundles Hadoop's client)"
    )


_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>spark-statestore.local</groupId>
  <artifactId>{name}</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""

_DEPENDENCY = (
    "    <dependency><groupId>{0}</groupId><artifactId>{1}</artifactId>"
    "<version>{2}</version></dependency>"
)


def _pom(jar_set: JarSet) -> str:
    deps = [_DEPENDENCY.format(*c.split(":")) for c in jar_set.coordinates]
    return _POM.format(name=jar_set.name, version=jar_set.version, dependencies="\n".join(deps))


def resolve(jar_set: JarSet, *, mvn: str | None = None, force: bool = False) -> Path:
    """Resolve ``jar_set`` with Maven into its cache directory (a no-op when cached).

    Returns the directory. The jars are copied into a temporary sibling first and renamed
    into place with their manifest, so an interrupted resolution leaves no half cache.

    Raises
    ------
    JarsMissingError
        Maven is not installed, or it could not resolve the set (its output is included).
    """
    if jar_set.is_resolved() and not force:
        return jar_set.directory
    mvn = mvn or shutil.which("mvn")
    if not mvn:
        raise JarsMissingError(
            f"resolving the {jar_set.name} {jar_set.version} jars needs Maven (`mvn`), which is "
            "not on PATH: install it (Debian: apt-get install maven) or copy a resolved "
            f"cache into {cache_root()}"
        )
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root, prefix=f".{jar_set.name}-{jar_set.version}."))
    try:
        (work / "pom.xml").write_text(_pom(jar_set))
        out = work / "jars"
        command = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(work / "pom.xml"),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={out}",
        ]
        if jar_set.keep:
            command.append(f"-DincludeArtifactIds={','.join(jar_set.keep)}")
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not out.is_dir():
            tail = (done.stdout + done.stderr).strip()[-3000:]
            raise JarsMissingError(
                f"Maven could not resolve {', '.join(jar_set.coordinates)} "
                f"(exit {done.returncode}):\n{tail}"
            )
        names = sorted(p.name for p in out.glob("*.jar"))
        if not names:
            raise JarsMissingError(f"Maven resolved no jar for {', '.join(jar_set.coordinates)}")
        (out / _MANIFEST).write_text("\n".join(names) + "\n")
        target = jar_set.directory
        if target.exists():
            shutil.rmtree(target)
        out.rename(target)
    except OSError as exc:
        raise LocalKafkaError(f"could not write the jar cache under {root}: {exc}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return jar_set.directory
