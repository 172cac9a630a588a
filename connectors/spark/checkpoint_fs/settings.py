"""The settings the sink needs to reach a checkpoint's filesystem, from its own options.

Spark reaches the checkpoint with the Hadoop configuration of the session
(``spark.hadoop.fs.s3a.endpoint``, ``core-site.xml``...), which the sink's Python processes
never see: they get the sink's options and the process environment only. So the sink takes
the few settings it needs as options named after Hadoop's keys, the same names a user already
wrote for Spark without the ``spark.hadoop.`` prefix:

=============================== ========================================================
``fs.defaultFS``                the filesystem of a ``checkpointLocation`` without scheme
``dfs.namenode.http-address``   ``hdfs://``: the NameNode's WebHDFS ``host:port`` (HA: a
                                comma-separated list); default the URI's host, port 9870
``fs.s3a.endpoint``             S3: the endpoint (``http://host:9000`` or ``host:9000``)
``fs.s3a.endpoint.region``      S3: the region to sign requests for
``fs.s3a.access.key``           S3: the access key (with ``fs.s3a.secret.key``)
``fs.s3a.secret.key``           S3: the secret key
``fs.s3a.session.token``        S3: a session token for temporary credentials
``fs.s3a.path.style.access``    S3: ``http://endpoint/bucket/key`` instead of virtual hosts
``fs.s3a.connection.ssl.enabled`` S3: https for an endpoint given without a scheme
=============================== ========================================================

Anything not given comes from the environment, as the filesystems' own SDKs read it: the
AWS chain (``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``, instance roles...), Google's application
default credentials (``GOOGLE_APPLICATION_CREDENTIALS``), Azure's default credential chain
(``AZURE_CLIENT_ID``...), ``HADOOP_USER_NAME`` for WebHDFS.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spark_statestore.connectors.spark.checkpoint_fs.errors import CheckpointLocationError
from spark_statestore.connectors.spark.checkpoint_fs.location import CheckpointLocation
from spark_statestore.connectors.spark.option_table import OptionReader

__all__ = ["FILESYSTEM_OPTIONS", "FilesystemSettings", "S3Settings", "parse_http_addresses"]

FILESYSTEM_OPTIONS = (
    "fs.defaultFS",
    "dfs.namenode.http-address",
    "fs.s3a.endpoint",
    "fs.s3a.endpoint.region",
    "fs.s3a.access.key",
    "fs.s3a.secret.key",
    "fs.s3a.session.token",
    "fs.s3a.path.style.access",
    "fs.s3a.connection.ssl.enabled",
)
"""The sink's options that configure the checkpoint's filesystem."""


@dataclass(frozen=True, slots=True)
class S3Settings:
    """The ``fs.s3a.*`` options given (None: the AWS SDK's default from the environment)."""

    endpoint: str | None = None
    region: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    path_style_access: bool = False
    ssl_enabled: bool = True


@dataclass(frozen=True, slots=True)
class FilesystemSettings:
    """How to reach the checkpoint's filesystem: the options above, parsed."""

    default_fs: CheckpointLocation | None = None
    namenode_http_addresses: tuple[str, ...] = ()
    s3: S3Settings = field(default_factory=S3Settings)

    @classmethod
    def from_options(cls, options: OptionReader) -> FilesystemSettings:
        """Parse the filesystem options of the streaming sink.

        Raises
        ------
        CheckpointLocationError
            A malformed ``fs.defaultFS`` or ``dfs.namenode.http-address``, or only one of
            ``fs.s3a.access.key`` / ``fs.s3a.secret.key``.
        """
        default_text = options.text("fs.defaultFS")
        default_fs = None
        if default_text is not None:
            default_fs = CheckpointLocation.parse(default_text, option="fs.defaultFS")
            if default_fs.scheme is None:
                raise CheckpointLocationError(
                    f"option 'fs.defaultFS' {default_text!r} is not a URI: give the default "
                    "filesystem as Hadoop does, e.g. hdfs://namenode:8020 or file:///"
                )
        addresses_text = options.text("dfs.namenode.http-address")
        addresses: tuple[str, ...] = ()
        if addresses_text is not None:
            addresses = parse_http_addresses(addresses_text)
        access_key = options.text("fs.s3a.access.key")
        secret_key = options.text("fs.s3a.secret.key")
        if (access_key is None) != (secret_key is None):
            given = "fs.s3a.access.key" if secret_key is None else "fs.s3a.secret.key"
            raise CheckpointLocationError(
                f"option {given!r} needs its pair: give both fs.s3a.access.key and "
                "fs.s3a.secret.key, or neither (then the AWS SDK's default chain, e.g. "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, gives the credentials)"
            )
        s3 = S3Settings(
            endpoint=options.text("fs.s3a.endpoint"),
            region=options.text("fs.s3a.endpoint.region"),
            access_key=access_key,
            secret_key=secret_key,
            session_token=options.text("fs.s3a.session.token"),
            path_style_access=options.boolean("fs.s3a.path.style.access"),
            ssl_enabled=options.boolean("fs.s3a.connection.ssl.enabled"),
        )
        return cls(default_fs=default_fs, namenode_http_addresses=addresses, s3=s3)


def parse_http_addresses(
    text: str, *, option: str = "dfs.namenode.http-address"
) -> tuple[str, ...]:
    """``host:port`` addresses, comma-separated (an HA pair of NameNodes), in order.

    Raises
    ------
    CheckpointLocationError
        Naming ``option`` and the address that is not ``host:port`` with a port of 1-65535.
    """
    addresses = []
    for item in text.split(","):
        address = item.strip()
        host, colon, port = address.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if (
            not colon
            or not host
            or any(c in host for c in "/@?#[] ")
            or not (port.isascii() and port.isdigit())
            or not 0 < int(port) < 65536
        ):
            raise CheckpointLocationError(
                f"option {option!r}: {address!r} is not host:port (e.g. namenode:9870, or "
                "nn1:9870,nn2:9870 for an HA pair)"
            )
        addresses.append(address)
    return tuple(addresses)
