"""Reading a file from HDFS over WebHDFS, the NameNode's HTTP interface, with the stdlib.

Why WebHDFS and not ``pyarrow.fs.HadoopFileSystem``: that one loads ``libhdfs.so`` and a JVM
with a Hadoop distribution's classpath into the reading process. PySpark ships neither
(only the shaded Hadoop client jars), nor do the package registries, and a JVM costs seconds
in each commit process. Every NameNode serves WebHDFS by default
(``dfs.webhdfs.enabled``), on its HTTP address (``dfs.namenode.http-address``, port 9870 by
default since Hadoop 3): an ``OPEN`` there redirects to a DataNode holding the file.

Authentication is Hadoop's "simple" one (``user.name``: ``HADOOP_USER_NAME``, else the OS
user). A cluster that demands Kerberos (SPNEGO) answers 401, which is reported as such.
With HA NameNodes, the standby answers ``StandbyException`` and the next address is tried.
"""

from __future__ import annotations

import getpass
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence

from spark_statestore.connectors.spark.checkpoint_fs.errors import CheckpointReadError

__all__ = ["DEFAULT_HTTPS_PORT", "DEFAULT_HTTP_PORT", "read_webhdfs", "webhdfs_user"]

DEFAULT_HTTP_PORT = 9870
"""The NameNode's HTTP port since Hadoop 3 (``dfs.namenode.http-address``)."""
DEFAULT_HTTPS_PORT = 9871
"""The NameNode's HTTPS port since Hadoop 3 (``dfs.namenode.https-address``)."""

_TIMEOUT_S = 30.0


def webhdfs_user() -> str:
    """The user WebHDFS requests act as: ``HADOOP_USER_NAME`` as Hadoop's client reads it."""
    named = os.environ.get("HADOOP_USER_NAME")
    if named:
        return named
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # a uid without a passwd entry (containers)
        return str(os.getuid())


def read_webhdfs(
    bases: Sequence[str], path: str, *, shown: str, timeout: float = _TIMEOUT_S
) -> bytes:
    """The content of the file ``path`` from the first NameNode of ``bases`` that serves it.

    Parameters
    ----------
    bases
        ``http://host:port`` or ``https://host:port`` of each NameNode, in order.
    path
        Absolute HDFS path.
    shown
        The file's name in error messages (the checkpoint URI).

    Raises
    ------
    CheckpointReadError
        The file does not exist (``missing``), the cluster wants Kerberos, refused the user,
        or no NameNode answered.
    """
    query = urllib.parse.urlencode({"op": "OPEN", "user.name": webhdfs_user()})
    quoted = urllib.parse.quote(path, safe="/")
    problems = []
    for base in bases:
        url = f"{base}/webhdfs/v1{quoted}?{query}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            kind, message = _remote_exception(exc)
            if exc.code == 404 or kind == "FileNotFoundException":
                raise CheckpointReadError(
                    f"{shown} does not exist (WebHDFS at {base}: {message})", missing=True
                ) from exc
            if exc.code == 401:
                raise CheckpointReadError(
                    f"cannot read {shown}: WebHDFS at {base} demands authentication (Kerberos/"
                    "SPNEGO), which the sink's reader does not speak; read the checkpoint "
                    "from a filesystem without Kerberos, or open WebHDFS to simple "
                    "authentication for the sink's user"
                ) from exc
            if kind == "StandbyException":  # an HA pair: the other NameNode is active
                problems.append(f"{base}: standby")
                continue
            raise CheckpointReadError(
                f"cannot read {shown}: WebHDFS at {base} answered HTTP {exc.code} "
                f"({kind or 'error'}: {message}) for user {webhdfs_user()!r} (HADOOP_USER_NAME)"
            ) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            problems.append(f"{base}: {reason}")
    raise CheckpointReadError(
        f"cannot read {shown}: no NameNode served it over WebHDFS ({'; '.join(problems)}). "
        "The sink reads hdfs:// through the NameNode's HTTP address: set option "
        "'dfs.namenode.http-address' to it (host:port, e.g. namenode:9870; "
        "nn1:9870,nn2:9870 for an HA pair) if it is not the URI's host on port "
        f"{DEFAULT_HTTP_PORT}"
    )


def _remote_exception(error: urllib.error.HTTPError) -> tuple[str, str]:
    """The Java exception's simple name and message of a WebHDFS error reply, when given."""
    try:
        body = json.loads(error.read().decode("utf-8", "replace"))
        remote = body["RemoteException"]
        return str(remote.get("exception", "")), str(remote.get("message", ""))[:300]
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        return "", str(error.reason)[:300]
