"""A streaming query's checkpoint, as the sink reads it: the query id and the offset log.

Spark writes ``<checkpointLocation>/metadata`` (one JSON line with the query's ``id``) when
the query is created, and ``<checkpointLocation>/offsets/<batchId>`` (``v1``, the batch's
metadata, then one line per source) before the batch runs. The sink reads the first when
its writer is built and the second in each driver-side commit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from spark_statestore.connectors.spark.checkpoint_fs.errors import CheckpointReadError
from spark_statestore.connectors.spark.checkpoint_fs.filesystems import check_readable, read_bytes
from spark_statestore.connectors.spark.checkpoint_fs.location import CheckpointLocation
from spark_statestore.connectors.spark.checkpoint_fs.settings import FilesystemSettings
from spark_statestore.connectors.spark.option_table import OptionReader
from spark_statestore.connectors.spark.paths import resolve_local_path

__all__ = ["QueryCheckpoint", "parse_offset_log"]

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class QueryCheckpoint:
    """Where a query's checkpoint is and how to reach its filesystem (picklable).

    Attributes
    ----------
    location
        The directory, qualified with ``fs.defaultFS``.
    settings
        The filesystem options given to the sink.
    """

    location: CheckpointLocation
    settings: FilesystemSettings

    @classmethod
    def from_options(cls, text: str, options: OptionReader) -> QueryCheckpoint:
        """Parse ``checkpointLocation`` and the filesystem options; check the location's
        filesystem can be read here (so a query fails as it starts, not at a commit).

        Raises
        ------
        CheckpointLocationError
            Naming the option: see :meth:`CheckpointLocation.parse` and
            :func:`~spark_statestore.connectors.spark.checkpoint_fs.filesystems.check_readable`.
        """
        settings = FilesystemSettings.from_options(options)
        location = CheckpointLocation.parse(text).qualified(settings.default_fs)
        if location.scheme is None and not location.path.startswith("/"):
            # On the local disk, where Spark puts it: below its JVM's working directory, not
            # this worker's (Spark Connect runs workers in a per-session directory).
            location = replace(location, path=resolve_local_path(location.path))
        check_readable(location, settings)
        return cls(location, settings)

    def read_text(self, *names: str) -> str:
        """The UTF-8 text of the checkpoint's file ``names`` (``"offsets", "3"``).

        Raises
        ------
        CheckpointReadError
            The file is missing or unreadable, or not UTF-8.
        """
        location = self.location.child(*names)
        data = read_bytes(location, self.settings)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CheckpointReadError(f"{location} is not UTF-8 text ({exc})") from exc

    def query_id(self) -> str:
        """The streaming query's id from ``<checkpointLocation>/metadata``.

        Raises
        ------
        CheckpointReadError
            The file cannot be read, or holds no query id.
        """
        try:
            text = self.read_text("metadata")
        except CheckpointReadError as exc:
            hint = ""
            if exc.missing and self.location.scheme is None:
                hint = (
                    ". A checkpointLocation without a scheme is read from the driver's local "
                    "disk: if Spark's default filesystem (fs.defaultFS) is another one, give "
                    "the full URI (hdfs://namenode:8020/...) or set option fs.defaultFS"
                )
            raise CheckpointReadError(
                f"cannot read the query id: {exc}; is checkpointLocation the directory of "
                f"this query's checkpoint?{hint}",
                missing=exc.missing,
            ) from exc
        try:  # Spark's StreamMetadata.read parses the whole file as one JSON object
            query_id = json.loads(text)["id"]
        except (ValueError, RecursionError, KeyError, TypeError) as exc:
            query_id = exc
        if not isinstance(query_id, str):
            raise CheckpointReadError(
                f"{self.location.child('metadata')} holds no query id (got {query_id!r:.200}); "
                "is checkpointLocation the directory of this query's checkpoint?"
            )
        return query_id

    def source_offsets(self, batch_id: int) -> list[Any]:
        """The batch's source offsets from Spark's offset log, one entry per source.

        Raises
        ------
        CheckpointReadError
            The batch's offset log entry cannot be read.
        """
        try:
            text = self.read_text("offsets", str(batch_id))
        except CheckpointReadError as exc:
            raise CheckpointReadError(
                f"cannot read the offsets of batch {batch_id}: {exc}; the commit needs "
                "Spark's offset log of this query",
                missing=exc.missing,
            ) from exc
        return parse_offset_log(text)


def parse_offset_log(text: str) -> list[Any]:
    """The sources' offsets of an offset log entry: JSON where a line is JSON, else the line
    as written (``v1``, the batch metadata, then one line per source; ``-`` for a source
    without offsets).

    Lines end as Java's ``BufferedReader.readLine`` ends them, which Spark's
    ``OffsetSeqLog`` reads with: at ``\\n``, ``\\r`` or ``\\r\\n`` only (``str.splitlines``
    would also split a JSON string holding U+2028).
    """
    lines = _LINE_END.split(text)
    if lines and not lines[-1]:
        lines.pop()  # the last line's end
    offsets: list[Any] = []
    for line in lines[2:]:
        try:
            offsets.append(json.loads(line))
        except (ValueError, RecursionError):
            offsets.append(line)
    return offsets
