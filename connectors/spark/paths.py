"""Local paths in options, resolved as Spark resolves them.

Spark resolves a relative path (a ``checkpointLocation``, a Parquet path) against the working
directory of its JVM. The plugin's code runs in Spark's Python workers: in a classic local
session they work in the JVM's directory, but under Spark Connect the data source workers
work in a per-session artifact directory (``spark-*/userFiles-*/<session id>`` in Spark's
local directory) that Spark deletes with the application. Resolved there, a relative store
path would put the store where no other session finds it and Spark later removes it, and the
sink would look for a checkpoint Spark wrote elsewhere. So a relative path is joined to the
working directory of the Spark JVM the worker runs under: Spark's own base.
"""

from __future__ import annotations

import contextlib
import os
import re

from spark_statestore.connectors.spark.driver import spark_jvm

__all__ = ["resolve_local_path", "spark_working_directory"]

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
"""A URI's scheme (``file:``, ``hdfs:``, ``s3a:``): such a path is not a local one."""


def spark_working_directory() -> str:
    """The working directory of the Spark JVM this process runs under (the driver's for the
    driver-side code of a data source), or this process's own when no JVM is above it."""
    jvm = spark_jvm()
    if jvm is not None:
        with contextlib.suppress(OSError):
            return os.readlink(f"/proc/{jvm.pid}/cwd")
    return os.getcwd()


def resolve_local_path(path: str) -> str:
    """``path`` as Spark's JVM reads it: an absolute path or a URI unchanged, a relative path
    joined to :func:`spark_working_directory`."""
    if os.path.isabs(path) or _SCHEME.match(path):
        return path
    return os.path.join(spark_working_directory(), path)
