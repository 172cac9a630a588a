"""What the sink's store server and the commit processes agree on: the server's record
``<store>/_sink_server.json`` (:class:`ServerRecord`), the options that must match
(:func:`fingerprint`), and the Flight actions and the batch their bodies carry
(:func:`batch_to_json`, :func:`batch_from_json`).

The server (:mod:`.server`) writes the record and answers the actions; a commit process
(:mod:`.remote`, :mod:`.liveness`) reads the record and calls them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import astuple, dataclass
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.spark.driver import ProcessId

if TYPE_CHECKING:
    from spark_statestore.connectors.spark.options import SinkOptions
    from spark_statestore.sink.commit import BatchToCommit

__all__ = [
    "ACTION_ALIVE",
    "ACTION_COMMIT",
    "ACTION_STOP",
    "LOG_FILE",
    "SERVER_FILE",
    "STOPPING",
    "ServerRecord",
    "batch_from_json",
    "batch_to_json",
    "fingerprint",
    "read_server_record",
]

SERVER_FILE = "_sink_server.json"
LOG_FILE = "_sink_server.log"
ACTION_COMMIT = "sink_commit"
ACTION_STOP = "sink_stop"
ACTION_ALIVE = "sink_alive"
STOPPING = "stopping"
"""The key of a commit's reply when the server stopped before it began: the commit process
waits for it to go and commits through a new one."""


@dataclass(frozen=True, slots=True)
class ServerRecord:
    """``<store>/_sink_server.json``: the running server (owner-only: it holds the secret)."""

    pid: int
    location: str
    secret: str
    fingerprint: str
    start: str
    """The process's start time (see :class:`ProcessId`): a kill never hits a later process
    with its pid."""
    metrics_url: str | None = None
    """Where it serves the sink's metrics (option ``metricsPort``), or None."""

    @property
    def process(self) -> ProcessId:
        """The server's process."""
        return ProcessId(self.pid, self.start)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "location": self.location,
            "secret": self.secret,
            "fingerprint": self.fingerprint,
            "start": self.start,
            "metrics_url": self.metrics_url,
        }


def read_server_record(path: str) -> ServerRecord | None:
    """The server record of the store at ``path`` (possibly a dead server's), or None."""
    try:
        with open(os.path.join(path, SERVER_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
        record = ServerRecord(
            data["pid"],
            data["location"],
            data["secret"],
            data["fingerprint"],
            data["start"],
            data.get("metrics_url"),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(record.pid, int) or not all(
        isinstance(v, str)
        for v in (record.location, record.secret, record.fingerprint, record.start)
    ):
        return None
    if record.metrics_url is not None and not isinstance(record.metrics_url, str):
        return None
    return record


def fingerprint(options: SinkOptions) -> str:
    """What a server is started with that a commit must agree with (store, changelog,
    Kafka settings, serving): a commit with other options restarts the server."""
    import hashlib
    from dataclasses import asdict

    serve = None if options.serve is None else asdict(options.serve)
    settings = [
        options.path,
        options.bootstrap_servers,
        sorted(options.kafka.items()),
        options.changelog,
        options.application_id,
        options.allow_foreign_changelog,
        options.uncommitted_max_bytes,
        serve,
        options.serve_liveness_timeout_ms,
        options.serve_idle_timeout_ms,
        None if options.metrics is None else list(astuple(options.metrics)),
    ]
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def batch_to_json(batch: BatchToCommit) -> dict[str, Any]:
    """``batch`` as the body of a ``sink_commit`` action (without the secret)."""
    return {
        "query_id": batch.query_id,
        "batch_id": batch.batch_id,
        "staged": [staged.to_json() for staged in batch.staged],
        "source_offsets": batch.source_offsets,
        "complete": batch.complete,
    }


def batch_from_json(data: Mapping[str, Any]) -> BatchToCommit:
    """The batch of a ``sink_commit`` action's body.

    Raises
    ------
    BadRequestError
        If the body does not describe a batch.
    """
    from spark_statestore.errors import StateStoreError
    from spark_statestore.serve.errors import BadRequestError
    from spark_statestore.sink.commit import BatchToCommit
    from spark_statestore.sink.staging import StagedFile, query_id_problem

    query_id, batch_id = data.get("query_id"), data.get("batch_id")
    staged, complete = data.get("staged"), data.get("complete")
    if not isinstance(query_id, str) or query_id_problem(query_id) is not None:
        raise BadRequestError(f"action {ACTION_COMMIT!r}: bad query_id {str(query_id)[:80]!r}")
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise BadRequestError(f"action {ACTION_COMMIT!r}: batch_id must be an int >= 0")
    if not isinstance(staged, list) or not isinstance(complete, bool):
        raise BadRequestError(f"action {ACTION_COMMIT!r}: staged must be a list, complete a bool")
    try:
        files = [StagedFile.from_json(item) for item in staged]
    except StateStoreError as exc:
        raise BadRequestError(f"action {ACTION_COMMIT!r}: {exc}") from exc
    return BatchToCommit(query_id, batch_id, files, data.get("source_offsets"), complete)
