"""The sink's staging area: each task's rows, in order, in an Arrow IPC file next to the store.

Executors write their part of a micro-batch here; the driver's commit applies exactly the
files named by the tasks' commit messages, so a retried or speculative task attempt (which
writes its own file) never duplicates rows. Files are written under a temporary name and
renamed when complete: a file under its final name is always whole.

Layout: ``<store>/_staging/<query id>/<batch id>/part-<partition>-<attempt>-<uuid>.arrow``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_statestore.integer_spec import ascii_integer
from spark_statestore.sink.errors import StagingError
from spark_statestore.store.crash import crash_point
from spark_statestore.store.files import DIR_MODE, make_private_dir

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "MAX_QUERY_ID_BYTES",
    "STAGING_DIR",
    "StagedFile",
    "StagingArea",
    "StagingError",
    "merge_max_offsets",
    "query_id_problem",
    "staged_schema",
]

_log = logging.getLogger(__name__)

STAGING_DIR = "_staging"
COORDINATES_FILE = "coordinates.arrow"
"""A batch's file of its published records' changelog coordinates (a deferred commit's)."""
_STAGED_FIELDS = {"name", "partition_id", "rows", "size", "max_offsets"}


MAX_QUERY_ID_BYTES = 255
"""The longest query id, in UTF-8 bytes: it names a directory (a file name's limit)."""


def query_id_problem(query_id: str) -> str | None:
    """Why ``query_id`` cannot name a staging directory, or None when it can.

    A query id (Spark's query id, or the batch writer's ``txnAppId``) is one directory name
    under the staging root: not empty, no NUL or path separator, not starting with ``.``,
    valid UTF-8 of at most :data:`MAX_QUERY_ID_BYTES` bytes.
    """
    if not query_id:
        return "is empty"
    if "\0" in query_id:
        return "contains a NUL character"
    if "/" in query_id or os.sep in query_id:
        return "contains a path separator '/'"
    if query_id.startswith("."):
        return "starts with '.'"
    try:
        size = len(query_id.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid Unicode (a lone surrogate)"
    if size > MAX_QUERY_ID_BYTES:
        return f"is {size} bytes long in UTF-8, more than {MAX_QUERY_ID_BYTES}"
    return None


def staged_schema() -> pa.Schema:
    """The columns of a staged file: the sink's normalized input rows."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("key", pa.binary(), nullable=False),
            pa.field("value", pa.binary()),  # null: delete
            pa.field("topic", pa.string()),
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
            pa.field("timestamp", pa.int64()),  # epoch ms
        ]
    )


@dataclass(frozen=True, slots=True)
class StagedFile:
    """What one task staged (the payload of its commit message).

    Parameters
    ----------
    name
        The file, relative to the staging root.
    partition_id
        The Spark partition (task) that wrote it; the commit applies files in this order.
    rows, size
        Row count and file size in bytes.
    max_offsets
        ``{topic: {partition: max offset}}`` of the input rows' record metadata.
    """

    name: str
    partition_id: int
    rows: int
    size: int
    max_offsets: Mapping[str, Mapping[int, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "partition_id": self.partition_id,
            "rows": self.rows,
            "size": self.size,
            "max_offsets": {
                t: {str(p): o for p, o in ps.items()} for t, ps in self.max_offsets.items()
            },
        }

    @classmethod
    def from_json(cls, data: Any) -> StagedFile:
        """The staged file described by ``data`` (what :meth:`to_json` returned).

        Raises
        ------
        StagingError
            If ``data`` is not such a description, or its name is not a staged file's (a
            relative ``<query id>/<batch id>/part-*.arrow`` path inside the staging area).
        """
        if not isinstance(data, dict) or set(data) != _STAGED_FIELDS:
            raise StagingError(f"not a staged file's description: {str(data)[:200]!r}")
        name, partition_id, rows, size = (data[k] for k in ("name", "partition_id", "rows", "size"))
        parts = name.split("/") if isinstance(name, str) else []
        if (
            len(parts) != 3
            or any(part in ("", ".", "..") for part in parts)
            or not parts[2].startswith("part-")
            or not parts[2].endswith(".arrow")
            or "\0" in name
        ):
            raise StagingError(f"not a staged file's name: {str(name)[:200]!r}")
        for what, value in (("partition_id", partition_id), ("rows", rows), ("size", size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise StagingError(f"staged file {name!r}: {what} must be an int >= 0")
        max_offsets: dict[str, dict[int, int]] = {}
        raw = data["max_offsets"]
        if not isinstance(raw, dict):
            raise StagingError(f"staged file {name!r}: max_offsets must be an object")
        for topic, offsets in raw.items():
            if not isinstance(offsets, dict):
                raise StagingError(f"staged file {name!r}: max_offsets of {topic!r}")
            parsed: dict[int, int] = {}
            for partition, offset in offsets.items():
                number = ascii_integer(partition) if isinstance(partition, str) else None
                if number is None or number < 0:
                    raise StagingError(f"staged file {name!r}: partition {partition!r}")
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                    raise StagingError(f"staged file {name!r}: offset {offset!r}")
                parsed[number] = offset
            max_offsets[topic] = parsed
        return cls(name, partition_id, rows, size, max_offsets)


class StagingArea:
    """The staging directory of the store at ``store_path``."""

    def __init__(self, store_path: str | os.PathLike[str]) -> None:
        self.root = os.path.join(os.fspath(store_path), STAGING_DIR)

    def _batch_dir(self, query_id: str, batch_id: int) -> str:
        problem = query_id_problem(query_id)
        if problem is not None:
            raise StagingError(
                f"query id {query_id[:80]!r} {problem}: it cannot name a staging directory"
            )
        return os.path.join(self.root, query_id, str(batch_id))

    def stage(
        self,
        query_id: str,
        batch_id: int,
        partition_id: int,
        attempt: int,
        batches: Iterable[pa.RecordBatch],
        on_batch: Callable[[pa.RecordBatch, Mapping[str, Mapping[int, int]]], None] | None = None,
    ) -> StagedFile:
        """Write ``batches`` (schema :func:`staged_schema`) to a new file of this task attempt;
        ``on_batch(batch, max_offsets)`` is called after each batch is written, with the
        largest input offsets of the attempt's rows so far. Without rows no file is kept
        (the result names none that exists, with ``rows`` 0)."""
        import pyarrow as pa

        directory = self._batch_dir(query_id, batch_id)
        # Tasks may stage before the store exists: the store directory is owner-only anyway.
        make_private_dir(os.path.dirname(self.root))
        os.makedirs(directory, mode=DIR_MODE, exist_ok=True)
        name = f"part-{partition_id:05d}-{attempt}-{uuid.uuid4().hex[:12]}.arrow"
        final = os.path.join(directory, name)
        temporary = os.path.join(directory, f".{name}.tmp")
        rows = 0
        max_offsets: dict[str, dict[int, int]] = {}
        schema = staged_schema()
        try:
            with pa.OSFile(temporary, "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
                for batch in batches:
                    if batch.num_rows == 0:
                        continue
                    writer.write_batch(batch)
                    rows += batch.num_rows
                    merge_max_offsets(max_offsets, batch)
                    if on_batch is not None:
                        on_batch(batch, max_offsets)
            if rows:
                with open(temporary, "rb") as handle:
                    os.fsync(handle.fileno())
                os.replace(temporary, final)
            else:  # nothing to commit (Spark's commit message says so): no file to clean up
                os.unlink(temporary)
            crash_point("sink.staged")
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        return StagedFile(
            os.path.relpath(final, self.root),
            partition_id,
            rows,
            os.path.getsize(final) if rows else 0,
            max_offsets,
        )

    def store_relative(self, staged: StagedFile) -> str:
        """A staged file's path relative to its store's directory."""
        return os.path.join(STAGING_DIR, staged.name)

    def coordinates_file(self, query_id: str, batch_id: int) -> str:
        """Where a deferred commit of the batch keeps its records' changelog coordinates
        (relative to the store's directory; removed with the batch's staged files)."""
        self._batch_dir(query_id, batch_id)  # a query id that can name a directory
        return os.path.join(STAGING_DIR, query_id, str(batch_id), COORDINATES_FILE)

    def read(self, staged: StagedFile) -> Iterator[pa.RecordBatch]:
        """The batches of a staged file, in the order they were written."""
        import pyarrow as pa

        path = os.path.join(self.root, staged.name)
        try:
            reader = pa.ipc.open_stream(pa.memory_map(path))
        except (OSError, pa.ArrowInvalid) as exc:
            raise StagingError(
                f"staged file {path} of Spark partition {staged.partition_id} cannot be read "
                f"({exc}); the batch cannot be committed: re-run the query (Spark will retry "
                "the batch from its checkpoint)"
            ) from exc
        yield from reader

    def remove_batch(self, query_id: str, batch_id: int) -> None:
        """Delete a batch's staged files (after its commit, or on abort)."""
        shutil.rmtree(self._batch_dir(query_id, batch_id), ignore_errors=True)

    def remove_unpromised(
        self, query_id: str, batch_id: int, promised: Iterable[StagedFile]
    ) -> None:
        """Delete a batch's files other than ``promised`` (and its coordinates): those of
        attempts Spark did not commit (a killed run's, a failed or speculative task's). The
        promised ones are the store's until it has applied them."""
        directory = self._batch_dir(query_id, batch_id)
        keep = {os.path.basename(staged.name) for staged in promised} | {COORDINATES_FILE}
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            return
        for entry in entries:
            if entry.name not in keep and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)

    def remove_stale(self, query_id: str, committed_batch: int, max_age_s: float = 86400.0) -> None:
        """Delete this query's batches up to ``committed_batch`` and other queries' staging
        untouched for ``max_age_s`` (left by dead queries)."""
        if not os.path.isdir(self.root):
            return
        now = time.time()
        for entry in os.scandir(self.root):
            if not entry.is_dir():
                continue
            if entry.name == query_id:
                for batch in os.scandir(entry.path):
                    number = ascii_integer(batch.name)
                    if number is not None and 0 <= number <= committed_batch:
                        shutil.rmtree(batch.path, ignore_errors=True)
            elif now - entry.stat().st_mtime > max_age_s:
                _log.info("removing stale staging of query %s in %s", entry.name, self.root)
                shutil.rmtree(entry.path, ignore_errors=True)


def merge_max_offsets(into: dict[str, dict[int, int]], batch: pa.RecordBatch) -> None:
    """Merge the largest input offset per topic and partition of ``batch`` (staged schema)
    into ``into`` (rows missing any of the three are left out)."""
    topics = batch.column("topic")
    if topics.null_count == len(topics):
        return
    import pyarrow as pa
    import pyarrow.compute as pc

    partitions, offsets = batch.column("partition"), batch.column("offset")
    if topics.null_count or partitions.null_count or offsets.null_count:
        whole = pc.and_(pc.and_(pc.is_valid(topics), pc.is_valid(partitions)), pc.is_valid(offsets))
        topics, partitions, offsets = (c.filter(whole) for c in (topics, partitions, offsets))
    names = pc.unique(topics).to_pylist()
    for name in names:
        if len(names) == 1:  # one input topic, as usual: no filtering by topic
            these, those = partitions, offsets
        else:
            mask = pc.equal(topics, pa.scalar(name, pa.string()))
            these, those = partitions.filter(mask), offsets.filter(mask)
        if not len(these):
            continue
        low, high = pc.min_max(these).values()
        if low == high:  # one input partition (a task of a Kafka source, as usual)
            current = into.setdefault(name, {})
            offset = pc.max(those).as_py()
            current[low.as_py()] = max(offset, current.get(low.as_py(), -1))
            continue
        # A group-by on one small integer key: a few times cheaper than on (topic, partition).
        grouped = pa.table({"partition": these, "offset": those}).group_by("partition")
        maxima = grouped.aggregate([("offset", "max")])
        current = into.setdefault(name, {})
        for partition, offset in zip(
            maxima.column("partition").to_pylist(),
            maxima.column("offset_max").to_pylist(),
            strict=True,
        ):
            current[partition] = max(offset, current.get(partition, -1))
