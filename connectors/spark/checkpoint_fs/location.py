"""A ``checkpointLocation`` read the way Spark reads it: as a Hadoop ``Path``.

Spark turns the option into ``new org.apache.hadoop.fs.Path(text)``, so the same text must
name the same directory here. Hadoop's rules (``Path(String)`` and ``Path.initialize`` of
Hadoop 3, checked against the real class in ``tests/integration/test_checkpoint_fs.py``):

* a scheme is the text before the first ``:``, when that colon comes before the first ``/``
  (``/tmp/a:b`` has none, ``a:b/c`` is a scheme ``a`` with a relative path: refused);
* an authority follows ``//`` up to the next ``/`` (``s3a://bucket``, ``hdfs://nn:8020``);
* the rest is the path, taken literally: no percent-decoding (``%20`` stays three
  characters), no query or fragment (``?`` and ``#`` are part of the name);
* repeated slashes collapse, ``.`` segments go and ``name/..`` pairs cancel (Hadoop
  normalizes the URI it builds), so ``hdfs://nn/a/../b//c`` is ``hdfs://nn/b/c``;
* ``file:c:/x`` is ``/c:/x`` (a Windows drive, on every OS).

Where Hadoop is laxer, the location is refused: a "scheme" holding ``?`` or ``#`` (Java's
``URI`` then reads a relative path with a query or fragment: ``f?le:`` is the path ``f``).
Where it is stricter (an authority Java's ``URI`` rejects, such as ``s3a://b]``), Spark
refuses the location before the sink sees it.

A location without a scheme is on Hadoop's default filesystem: the local disk unless
``fs.defaultFS`` says otherwise (:meth:`CheckpointLocation.qualified`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum

from spark_statestore.connectors.spark.checkpoint_fs.errors import CheckpointLocationError

__all__ = ["SCHEMES", "Backend", "CheckpointLocation", "scheme_problem"]


class Backend(Enum):
    """The filesystems the sink reads a checkpoint through; the value names it in errors."""

    LOCAL = "the local disk"
    WEBHDFS = "HDFS through WebHDFS"
    S3 = "S3"
    GCS = "Google Cloud Storage"
    AZURE = "Azure Data Lake Storage Gen2"


SCHEMES: dict[str, Backend] = {
    "file": Backend.LOCAL,
    "hdfs": Backend.WEBHDFS,
    "webhdfs": Backend.WEBHDFS,
    "swebhdfs": Backend.WEBHDFS,
    "s3a": Backend.S3,
    "s3": Backend.S3,
    "s3n": Backend.S3,
    "gs": Backend.GCS,
    "abfs": Backend.AZURE,
    "abfss": Backend.AZURE,
}
"""The schemes a checkpoint can be read from (lower case), and through what."""

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")  # RFC 3986, as java.net.URI checks it
_DRIVE = re.compile(r"[A-Za-z]:")

READABLE = (
    "a local path or file:, hdfs: / webhdfs: / swebhdfs: (read through WebHDFS), "
    "s3a: / s3: / s3n:, gs:, abfs: / abfss:"
)
"""The readable locations, as error messages list them."""


def scheme_problem(option: str, text: str, scheme: str) -> CheckpointLocationError:
    """The error for a location whose scheme the sink has no filesystem for."""
    return CheckpointLocationError(
        f"option {option!r} {text!r}: the spark_statestore sink reads Spark's offset log "
        "from the driver's Python process, without a JVM (so not through Hadoop's "
        f"FileSystem), and cannot read scheme {scheme!r}. It reads {READABLE}. Put the "
        "query's checkpoint on one of those (the store's own path is not affected), e.g. "
        "hdfs://namenode:8020/checkpoints/orders; docs/sink.md, 'Checkpoint locations'"
    )


@dataclass(frozen=True, slots=True)
class CheckpointLocation:
    """A checkpoint directory or a file in it, as Hadoop's ``Path`` reads it.

    Attributes
    ----------
    scheme
        Lower case; None for a plain path (the default filesystem).
    authority
        ``host:port``, a bucket, ``container@account.host``; None when absent.
    path
        Normalized, taken literally (``/checkpoints/q1``); relative only without a scheme.
    """

    scheme: str | None
    authority: str | None
    path: str

    @classmethod
    def parse(cls, text: str, *, option: str = "checkpointLocation") -> CheckpointLocation:
        """Parse ``text`` by Hadoop's rules (see the module docstring).

        Raises
        ------
        CheckpointLocationError
            Naming ``option``: an empty or malformed scheme, a relative path after a scheme,
            an authority without a scheme, or nothing after the scheme.
        """
        colon, slash = text.find(":"), text.find("/")
        scheme, start = None, 0
        if colon != -1 and (slash == -1 or colon < slash):
            scheme, start = text[:colon], colon + 1
            if _SCHEME.fullmatch(scheme) is None:
                raise CheckpointLocationError(
                    f"option {option!r} {text!r}: {scheme!r} before the first ':' is not a URI "
                    "scheme (a letter, then letters, digits, '+', '-' or '.'); give a path, or "
                    "a URI such as hdfs://namenode:8020/checkpoints/orders"
                )
        authority = None
        if text.startswith("//", start) and len(text) - start > 2:
            end = text.find("/", start + 2)
            end = len(text) if end == -1 else end
            authority, start = text[start + 2 : end] or None, end  # "file:///x": none
        rest = text[start:]
        if scheme is not None and scheme.lower() == "file" and _DRIVE.match(rest):
            rest = "/" + rest  # Hadoop reads file:c:/x as a Windows drive, on every OS
        path = _normalize(rest)
        if scheme is not None and not path.startswith("/") and (path or authority is None):
            what = "nothing" if not path else f"the relative path {path!r}"
            raise CheckpointLocationError(
                f"option {option!r} {text!r}: {what} after scheme {scheme!r}: a URI names an "
                f"absolute path, e.g. {scheme}:///checkpoints/orders or "
                f"{scheme}://host/checkpoints/orders"
            )
        if scheme is None and authority is not None:
            raise CheckpointLocationError(
                f"option {option!r} {text!r} starts with '//' but has no scheme: give the "
                "scheme too (hdfs://namenode:8020/...), or a plain path /..."
            )
        return cls(None if scheme is None else scheme.lower(), authority, path)

    def __str__(self) -> str:
        if self.scheme is None:
            return self.path
        if self.authority is None:
            return f"{self.scheme}:{self.path}"
        return f"{self.scheme}://{self.authority}{self.path}"

    @property
    def backend(self) -> Backend | None:
        """The filesystem to read it through (None: a scheme the sink cannot read)."""
        return Backend.LOCAL if self.scheme is None else SCHEMES.get(self.scheme)

    def child(self, *names: str) -> CheckpointLocation:
        """The location of ``names`` below this one (``metadata``, ``offsets``, ``7``)."""
        base = self.path.rstrip("/")
        if not base and self.scheme is None and not self.path:
            return replace(self, path="/".join(names))  # below the working directory
        return replace(self, path="/".join([base, *names]))  # a URI's path is absolute

    def qualified(self, default_fs: CheckpointLocation | None) -> CheckpointLocation:
        """This location with Hadoop's default filesystem (``fs.defaultFS``) filled in.

        A plain path takes the default's scheme and authority (unless the default is the
        local disk); ``hdfs:///x`` takes its authority when the schemes agree.

        Raises
        ------
        CheckpointLocationError
            A relative path on a default filesystem that is not the local disk (Hadoop puts
            it under the user's home directory there, which the sink does not guess).
        """
        if default_fs is None:
            return self
        if self.scheme is None:
            if default_fs.backend is Backend.LOCAL:
                return self
            if not self.path.startswith("/"):
                raise CheckpointLocationError(
                    f"option 'checkpointLocation' {self.path!r} is relative, and fs.defaultFS "
                    f"is {default_fs}: give an absolute path or a full URI, e.g. "
                    f"{default_fs.scheme}://{default_fs.authority or 'host'}/checkpoints/orders"
                )
            return replace(self, scheme=default_fs.scheme, authority=default_fs.authority)
        if self.authority is None and self.scheme == default_fs.scheme:
            return replace(self, authority=default_fs.authority)
        return self


def _normalize(path: str) -> str:
    """Hadoop's normalization: no empty or ``.`` segments, ``name/..`` pairs cancelled."""
    absolute = path.startswith("/")
    segments: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == ".." and segments and segments[-1] != "..":
            segments.pop()
        else:
            segments.append(segment)
    if absolute:
        return "/" + "/".join(segments)
    if segments and ":" in segments[0]:
        segments.insert(0, ".")  # keeps a relative "a:b" from reading as a scheme
    return "/".join(segments)
