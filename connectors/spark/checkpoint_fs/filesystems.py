"""Reading one file of a checkpoint through the filesystem its scheme names.

The layer is small on purpose: the sink reads two small files per query and per batch
(``metadata`` and ``offsets/<batchId>``), in a fresh Python process without a JVM.

* A plain path and ``file:`` are the local disk (``open``).
* ``s3a:``/``s3:``/``s3n:``, ``gs:``, ``abfs:``/``abfss:`` go through ``pyarrow.fs``
  (pyarrow is a dependency already; its wheels carry the S3, GCS and Azure clients, and read
  credentials the way the clouds' own SDKs do).
* ``hdfs:``, ``webhdfs:``, ``swebhdfs:`` go through WebHDFS
  (:mod:`~spark_statestore.connectors.spark.checkpoint_fs.webhdfs`; why not pyarrow's
  ``HadoopFileSystem`` is said there).

:func:`check_readable` runs when the options are parsed, so a scheme without a filesystem
here (or a pyarrow built without it) fails as the query starts, before anything is written;
:func:`read_bytes` wraps every failure once, in
:class:`~spark_statestore.connectors.spark.checkpoint_fs.errors.CheckpointReadError`.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from spark_statestore.connectors.spark.checkpoint_fs.errors import (
    CheckpointLocationError,
    CheckpointReadError,
)
from spark_statestore.connectors.spark.checkpoint_fs.location import (
    Backend,
    CheckpointLocation,
    scheme_problem,
)
from spark_statestore.connectors.spark.checkpoint_fs.settings import (
    FilesystemSettings,
    S3Settings,
)
from spark_statestore.connectors.spark.checkpoint_fs.webhdfs import (
    DEFAULT_HTTP_PORT,
    DEFAULT_HTTPS_PORT,
    read_webhdfs,
)

__all__ = ["check_readable", "pyarrow_filesystem", "read_bytes", "s3_arguments"]

_PYARROW_CLASS = {
    Backend.S3: "S3FileSystem",
    Backend.GCS: "GcsFileSystem",
    Backend.AZURE: "AzureFileSystem",
}


def check_readable(location: CheckpointLocation, settings: FilesystemSettings) -> Backend:
    """The backend that reads ``location`` (already :meth:`~CheckpointLocation.qualified`).

    Raises
    ------
    CheckpointLocationError
        A scheme without a filesystem here, a local URI naming another host, an ``hdfs:``
        URI without a NameNode, a bucket or container missing, or a pyarrow without the
        filesystem's client.
    """
    backend = location.backend
    shown = str(location)
    if backend is None:
        raise scheme_problem("checkpointLocation", shown, location.scheme or "")
    if backend is Backend.LOCAL:
        if location.authority not in (None, "", "localhost"):
            raise CheckpointLocationError(
                f"option 'checkpointLocation' {shown!r} names host {location.authority!r}: a "
                "file: URI is this machine's disk (file:///path); for another machine's disk "
                "use a shared filesystem such as HDFS or S3"
            )
        return backend
    named_elsewhere = location.scheme == "hdfs" and settings.namenode_http_addresses
    if not location.authority and not named_elsewhere:
        needed = {
            Backend.WEBHDFS: "the NameNode (hdfs://namenode:8020/...), or option fs.defaultFS",
            Backend.S3: "the bucket (s3a://bucket/...)",
            Backend.GCS: "the bucket (gs://bucket/...)",
            Backend.AZURE: "the container and account (abfss://container@account.dfs.core."
            "windows.net/...)",
        }[backend]
        raise CheckpointLocationError(
            f"option 'checkpointLocation' {shown!r} does not name {needed}"
        )
    if backend is Backend.AZURE and "@" not in (location.authority or ""):
        raise CheckpointLocationError(
            f"option 'checkpointLocation' {shown!r}: an abfs(s) URI names container@account "
            "(abfss://container@account.dfs.core.windows.net/...)"
        )
    if backend in _PYARROW_CLASS:
        _pyarrow_class(backend, shown)
    return backend


def read_bytes(location: CheckpointLocation, settings: FilesystemSettings) -> bytes:
    """The content of the file at ``location`` (already qualified).

    Raises
    ------
    CheckpointLocationError
        As :func:`check_readable`.
    CheckpointReadError
        The file is missing (``missing``) or its filesystem failed; the message names the
        file and the filesystem's answer.
    """
    backend = check_readable(location, settings)
    shown = str(location)
    if backend is Backend.WEBHDFS:
        return read_webhdfs(_namenodes(location, settings), location.path, shown=shown)
    try:
        if backend is Backend.LOCAL:
            with open(location.path, "rb") as handle:
                return handle.read()
        filesystem, path = pyarrow_filesystem(backend, location, settings)
        with filesystem.open_input_stream(path) as stream:
            return bytes(stream.read())
    except FileNotFoundError as exc:
        raise CheckpointReadError(
            f"{shown} does not exist ({backend.value}: {exc})", missing=True
        ) from exc
    except OSError as exc:  # pyarrow's filesystems raise OSError subclasses too
        raise CheckpointReadError(f"cannot read {shown} from {backend.value}: {exc}") from exc


def _namenodes(location: CheckpointLocation, settings: FilesystemSettings) -> list[str]:
    """``http(s)://host:port`` of the NameNode(s) serving ``location`` over WebHDFS: for
    ``hdfs:`` the option's addresses, else the URI's host on the default HTTP port; for
    ``webhdfs:``/``swebhdfs:`` the URI's authority (the HTTP address already)."""
    secure = location.scheme == "swebhdfs"
    protocol = "https" if secure else "http"
    if location.scheme == "hdfs" and settings.namenode_http_addresses:
        return [f"{protocol}://{address}" for address in settings.namenode_http_addresses]
    parts = urllib.parse.urlsplit(f"//{location.authority}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if location.scheme == "hdfs" or port is None:
        port = DEFAULT_HTTPS_PORT if secure else DEFAULT_HTTP_PORT
    host = parts.hostname or ""
    return [f"{protocol}://{f'[{host}]' if ':' in host else host}:{port}"]


def _pyarrow_class(backend: Backend, shown: str) -> Any:
    import pyarrow
    import pyarrow.fs

    name = _PYARROW_CLASS[backend]
    kind = getattr(pyarrow.fs, name, None)
    if kind is None:
        raise CheckpointLocationError(
            f"option 'checkpointLocation' {shown!r} is on {backend.value}, but this pyarrow "
            f"({pyarrow.__version__}) was built without pyarrow.fs.{name}: install pyarrow "
            "from PyPI (its wheels include it), or put the checkpoint elsewhere"
        )
    return kind


def s3_arguments(s3: S3Settings) -> dict[str, Any]:
    """``pyarrow.fs.S3FileSystem`` keyword arguments for the ``fs.s3a.*`` options given
    (nothing for an option not given: the AWS SDK's default from the environment)."""
    arguments: dict[str, Any] = {}
    if s3.endpoint is not None:
        endpoint = s3.endpoint
        scheme = "https" if s3.ssl_enabled else "http"
        for prefix in ("http://", "https://"):
            if endpoint.lower().startswith(prefix):
                scheme, endpoint = prefix[:-3], endpoint[len(prefix) :]
        arguments["endpoint_override"] = endpoint.rstrip("/")
        arguments["scheme"] = scheme
        # S3A addresses buckets as virtual hosts unless path style is asked for; pyarrow
        # uses path style with an endpoint override unless told otherwise.
        arguments["force_virtual_addressing"] = not s3.path_style_access
    elif not s3.ssl_enabled:
        arguments["scheme"] = "http"
    if s3.region is not None:
        arguments["region"] = s3.region
    if s3.access_key is not None:
        arguments["access_key"] = s3.access_key
        arguments["secret_key"] = s3.secret_key
        if s3.session_token is not None:
            arguments["session_token"] = s3.session_token
    return arguments


def pyarrow_filesystem(
    backend: Backend, location: CheckpointLocation, settings: FilesystemSettings
) -> tuple[Any, str]:
    """A ``pyarrow.fs`` filesystem for ``location`` and the file's path in it."""
    kind = _pyarrow_class(backend, str(location))
    authority = location.authority or ""
    if backend is Backend.S3:
        return kind(**s3_arguments(settings.s3)), authority + location.path
    if backend is Backend.GCS:
        return kind(), authority + location.path
    container, _, host = authority.partition("@")
    account = host.split(".", 1)[0]
    # The URI names the account's DFS host; pyarrow also reads through its blob host. Both
    # given, so a sovereign cloud's hosts (core.chinacloudapi.cn...) are kept.
    azure = kind(
        account_name=account,
        dfs_storage_authority=host,
        blob_storage_authority=host.replace(".dfs.", ".blob.", 1),
    )
    return azure, container + location.path
