"""Ship the plugin to a cluster's executors: a packed Python environment for ``spark.archives``.

A cluster's executors run Python tasks with an interpreter of their own host, which has
neither the plugin nor its compiled extension. Spark's way to give them both (PySpark's
"Python Package Management" guide) is a packed virtualenv passed as ``spark.archives``: Spark
copies it to every executor and unpacks it in the executor's working directory, and
``spark.pyspark.python`` names the interpreter in it. :func:`pack_environment` makes that
archive from wheels (the package's and the extension's manylinux wheel, which carries its own
LevelDB, snappy and OpenSSL, so the executors' hosts need none of them):

    >>> wheels = sorted(glob.glob("dist/*.whl"))  # make dist's      # doctest: +SKIP
    >>> shipped = pack_environment("statestore-env.tar.gz", wheels)  # doctest: +SKIP
    >>> shipped.link_driver()                                        # doctest: +SKIP
    >>> os.environ["PYSPARK_PYTHON"] = shipped.conf["spark.pyspark.python"]  # doctest: +SKIP
    >>> spark = SparkSession.builder.config(map=shipped.conf).getOrCreate()  # doctest: +SKIP

PySpark itself and py4j are left out by default: the executors import the cluster's own
(Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on their ``PYTHONPATH``), which is
what their JVM speaks, and they are most of an environment's size. The virtualenv's
``bin/python`` points at the interpreter it was made with, so every executor host needs
that Python at the same path (as for any packed virtualenv); the archive says which.
"""

from __future__ import annotations

import email.parser
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spark_statestore.connectors.spark.errors import SparkSourceError

__all__ = ["DEFAULT_NAME", "ShippedEnvironment", "pack_environment"]

DEFAULT_NAME = "statestore-env"
"""The directory executors unpack the archive into (``spark.archives``' ``#name``)."""

_LEFT_OUT = ("pyspark", "py4j")
_PIP_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class ShippedEnvironment:
    """A packed environment and the Spark settings that ship it.

    Attributes
    ----------
    archive
        The ``.tar.gz`` file.
    name
        The directory it unpacks to in each executor's working directory.
    python
        The interpreter the virtualenv was made with: every executor host needs it at this
        path.
    """

    archive: Path
    name: str
    python: str

    def link_driver(self, directory: str | os.PathLike[str] | None = None) -> Path:
        """Make ``<directory>/<name>`` (default: the current directory) a link to this
        process's own environment, and return it.

        A driver in client mode runs Python workers of its own too (Spark plans a Python
        data source's reads there), with the same ``./<name>/bin/python``, resolved against
        the directory the driver started in, where Spark does not unpack the archive. Call
        this before the session starts; the link's interpreter is this one, which has the
        plugin. An existing link to the same place is kept.

        Raises
        ------
        SparkSourceError
            Something else already has that name.
        """
        link = Path(directory or os.getcwd()).absolute() / self.name
        here = Path(sys.prefix).absolute()
        if link.is_symlink() and Path(os.readlink(link)) == here:
            return link
        if link.exists() or link.is_symlink():
            raise SparkSourceError(
                f"cannot link {link} to this driver's environment {here}: it exists; remove "
                f"it, or start the driver in another directory"
            )
        link.symlink_to(here, target_is_directory=True)
        return link

    @property
    def conf(self) -> dict[str, str]:
        """``spark.archives`` and the executors' ``spark.pyspark.python``."""
        return {
            "spark.archives": f"{self.archive}#{self.name}",
            "spark.pyspark.python": f"./{self.name}/bin/python",
        }


def pack_environment(
    archive: str | os.PathLike[str],
    requirements: Sequence[str],
    *,
    python: str | None = None,
    name: str = DEFAULT_NAME,
    with_pyspark: bool = False,
    pip_args: Sequence[str] = (),
) -> ShippedEnvironment:
    """Make a virtualenv with ``requirements`` installed and pack it into ``archive``.

    Parameters
    ----------
    archive
        The file to write, ``.tar.gz`` (or ``.tgz``).
    requirements
        What pip installs: wheel files (``make dist``'s) or requirement specifiers (from an
        index), e.g. ``spark-statestore==0.1.0`` and ``spark-statestore-native==0.1.0``.
    python
        The interpreter to make the virtualenv with (default: this one). Executors need the
        same Python version, at the same path.
    name
        The directory it unpacks to on executors.
    with_pyspark
        Keep PySpark and py4j in the archive (they are removed by default: the executors use
        their cluster's).
    pip_args
        More arguments for ``pip install`` (``--find-links``, ``--index-url``, ...).

    Raises
    ------
    SparkSourceError
        The archive's suffix is not ``.tar.gz`` or ``.tgz``, or the virtualenv or pip failed
        (the message has pip's output).
    """
    target = Path(archive).absolute()
    if not (target.name.endswith(".tar.gz") or target.name.endswith(".tgz")):
        # Spark unpacks a plain .tar with its own code, which drops the programs' execute
        # bits (the executors then fail with "Permission denied"); .tar.gz goes through
        # Hadoop's, which keeps them.
        raise SparkSourceError(
            f"cannot pack an environment into {target}: name it .tar.gz or .tgz (Spark "
            "unpacks a plain .tar without its programs' execute permission)"
        )
    if not requirements:
        raise SparkSourceError("pack_environment needs requirements: the wheels to install")
    interpreter = python or sys.executable
    with tempfile.TemporaryDirectory(prefix="spark-statestore-pack-") as scratch:
        venv = Path(scratch) / name
        # Copies, not symlinks, of the interpreter: Spark refuses to unpack an archive with
        # a link that points outside it ("would create entry outside of ..."), and a venv's
        # bin/python links to the absolute path of the Python it was made with.
        _run([interpreter, "-m", "venv", "--copies", str(venv)], "making the virtualenv")
        pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
        wheels = [r for r in requirements if r.endswith(".whl")]
        if wheels and len(wheels) == len(requirements) and not with_pyspark:
            # The wheels without their dependencies, then those dependencies but PySpark's:
            # PySpark is never installed (an sdist of 400 MB of jars, built on a cold cache).
            _run([*pip, "install", "--quiet", "--no-deps", *pip_args, *wheels], "installing it")
            needs = _dependencies(wheels)
            if needs:
                _run([*pip, "install", "--quiet", *pip_args, *needs], "installing its needs")
        else:
            _run([*pip, "install", "--quiet", *pip_args, *requirements], "installing into it")
            if not with_pyspark:
                _run([*pip, "uninstall", "--quiet", "--yes", *_LEFT_OUT], "leaving PySpark out")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        # Level 1: most of the size is already compressed libraries; speed matters more.
        with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
            for entry in sorted(venv.iterdir()):
                tar.add(entry, arcname=entry.name)
        partial.replace(target)
    base = os.path.realpath(interpreter)
    return ShippedEnvironment(archive=target, name=name, python=base)


def _dependencies(wheels: Sequence[str]) -> list[str]:
    """The ``Requires-Dist`` of ``wheels`` (none under an extra), less PySpark, py4j and the
    wheels themselves."""
    names: set[str] = set()
    needs: list[str] = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            metadata_name = next(
                (n for n in archive.namelist() if n.endswith(".dist-info/METADATA")), None
            )
            if metadata_name is None:
                raise SparkSourceError(f"{wheel} is not a wheel: it has no .dist-info/METADATA")
            metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode())
        names.add(_normalized(str(metadata["Name"])))
        needs.extend(metadata.get_all("Requires-Dist") or [])
    kept = []
    for need in needs:
        if re.search(r"\bextra\s*==", need):
            continue
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", need)
        name = _normalized(match.group(1)) if match else ""
        if name and name not in names and name not in _LEFT_OUT:
            kept.append(need)
    return sorted(set(kept))


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise SparkSourceError(
            f"packing the executors' environment failed while {what} "
            f"({' '.join(command[:4])} ... exited with {done.returncode}):\n"
            f"{(done.stdout + done.stderr)[-3000:]}"
        )
