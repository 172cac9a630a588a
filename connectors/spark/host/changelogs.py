"""The store host's changelog publishing: one
:class:`~spark_statestore.connectors.kafka.sink.streamed.StreamedChangelog` per store whose
sink publishes a changelog, fed by the tasks' staging streams and driven by the commit's
calls (:mod:`.publishing` is the commit's side of them).

The commit's calls carry the host's commit token (in its owner-only record, never in the
plan): the tasks' token lets a task stage rows, not publish or commit anything.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.spark.host.requests import bad_request, store_path

if TYPE_CHECKING:
    from spark_statestore.connectors.kafka.sink.streamed import (
        ChangelogTarget,
        StreamedAttempt,
        StreamedChangelog,
    )

__all__ = ["UPKEEP_S", "HostChangelogs"]

_log = logging.getLogger(__name__)

UPKEEP_S = 5.0
"""How often the host looks for streamed transactions nobody finishes."""


class HostChangelogs:
    """The changelogs a store host publishes, by store path.

    Parameters
    ----------
    location
        The host's location (for messages).
    commit_token
        The token of the commit's calls; None: the host publishes nothing (every call is
        refused, and tasks only stage).
    """

    def __init__(self, location: str, commit_token: str | None) -> None:
        from spark_statestore.serve.auth import check_token

        self._location = location
        self._commit_token = None if commit_token is None else check_token(commit_token)
        self._changelogs: dict[str, StreamedChangelog] = {}
        self._retired: dict[str, tuple[int, int]] = {}
        """Per changelog topic, the batches of its publishers replaced or closed: streamed,
        published at the commit."""
        self._lock = threading.Lock()
        self._partitions: dict[tuple[str, str, tuple[tuple[str, str], ...]], int] = {}
        self._stopped = threading.Event()
        self._upkeep = threading.Thread(target=self._keep_up, name="host-changelogs", daemon=True)
        self._upkeep.start()

    # -- the tasks' side ------------------------------------------------------------------
    def streaming(
        self, store: str, query_id: str, batch_id: int, partition_id: int, attempt: int
    ) -> tuple[StreamedChangelog, StreamedAttempt] | None:
        """The changelog and handle of a task attempt whose rows its store's changelog
        publishes while they are staged, or None (stage only)."""
        with self._lock:
            changelog = self._changelogs.get(store)
        if changelog is None:
            return None
        handle = changelog.join(query_id, batch_id, partition_id, attempt)
        return None if handle is None else (changelog, handle)

    # -- the commit's side ----------------------------------------------------------------
    def changelog(self, request: Mapping[str, Any]) -> tuple[str, StreamedChangelog]:
        """The store and its changelog publisher a commit's call names (made, or made again
        for another target, here)."""
        from spark_statestore.connectors.kafka.sink.streamed import (
            ChangelogTarget,
            StreamedChangelog,
        )

        self._check_token(request)
        store = store_path(request)
        try:
            target = ChangelogTarget.from_json(request.get("target"))
        except ValueError as exc:
            raise bad_request(f"changelog call: {exc}") from exc
        with self._lock:
            current = self._changelogs.get(store)
            if current is not None and current.target == target:
                return store, current
            if current is not None:
                self._retire(current)
                current.close()
            made = self._changelogs[store] = StreamedChangelog(target)
            return store, made

    def action(self, name: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """A commit's action (:mod:`.publishing`): partitions, published, expect, abort. Errors of
        publishing (Kafka's, the store's) come back in the reply, to be raised as they are."""
        from spark_statestore.connectors.spark.host import publishing
        from spark_statestore.position import Position

        if name == publishing.PARTITIONS:
            from spark_statestore.connectors.kafka.sink.streamed import ChangelogTarget

            self._check_token(request)
            try:
                target = ChangelogTarget.from_json(request.get("changelog"))
            except ValueError as exc:
                raise bad_request(f"{name}: {exc}") from exc
            try:
                return {"partitions": self._partition_count(target)}
            except Exception as exc:
                if _publishing_error(exc):
                    return {"error": publishing.error_to_json(exc)}
                raise
        if name == publishing.ABORT:
            self._check_token(request)
            store = store_path(request)
            query_id, batch_id = _batch_of(request, name)
            with self._lock:
                existing = self._changelogs.get(store)
            if existing is not None:
                existing.abort(query_id, batch_id)
            return {"aborted": batch_id}
        _, changelog = self.changelog(request)
        try:
            if name == publishing.PUBLISHED:
                published = changelog.published_batch()
                return {
                    "published": None
                    if published is None
                    else {
                        "query_id": published.query_id,
                        "batch_id": published.batch_id,
                        "end_offsets": {str(p): o for p, o in published.end_offsets.items()},
                    }
                }
            if name != publishing.EXPECT:
                raise bad_request(f"the store host has no changelog action {name!r}")
            query_id, batch_id = _batch_of(request, name)
            budget = request.get("budget_bytes")
            if isinstance(budget, bool) or not isinstance(budget, int):
                raise bad_request(f"{name}: budget_bytes is an int")
            position = Position.from_dict(request.get("position") or {})
            changelog.expect(query_id, batch_id, position, budget)
            return {"expected": batch_id}
        except Exception as exc:
            if _publishing_error(exc):
                return {"error": publishing.error_to_json(exc)}
            raise

    def _partition_count(self, target: ChangelogTarget) -> int:
        """The partition count of ``target``'s topic (its store id aside), asked of Kafka
        once per topic and settings, as a publisher asks it once."""
        from spark_statestore.connectors.kafka.sink.publisher import KafkaChangelogPublisher

        key = (target.bootstrap_servers, target.topic, target.config)
        with self._lock:
            known = self._partitions.get(key)
        if known is not None:
            return known
        publisher = KafkaChangelogPublisher(
            target.bootstrap_servers,
            target.topic,
            application_id=target.application_id,
            config=dict(target.config),
        )
        try:
            count = publisher.partition_count()
        finally:
            publisher.close()
        with self._lock:
            self._partitions[key] = count
        return count

    def publish_staged(self, request: Mapping[str, Any], reader: Any, writer: Any) -> None:
        """The commit's ``DoExchange``: read complete mode's tombstone keys, have the store's
        changelog commit the batch (:meth:`StreamedChangelog.publish_staged`), and reply one
        coordinates batch for the tombstones and one per staged file, then the outcome as
        JSON metadata (or the error, to be raised as it is)."""
        import pyarrow as pa

        from spark_statestore.connectors.spark.host import publishing
        from spark_statestore.position import Position
        from spark_statestore.sink.changes import StagedBatch
        from spark_statestore.sink.staging import StagedFile, StagingArea

        store, changelog = self.changelog(request)
        files = request.get("files")
        query_id, batch_id = _batch_of(request, "publish")
        if not isinstance(files, list):
            raise bad_request("publish: files is a list")
        header = request.get("header")
        absent = [
            key
            for chunk in reader
            if chunk.data is not None
            for key in chunk.data.column(0).to_pylist()
        ]
        batch = StagedBatch(
            changelog.target.store_id,
            query_id,
            batch_id,
            [StagedFile.from_json(f) for f in files],
            request.get("source_offsets"),
            None if header is None else Position.from_dict(header),
            absent,
        )
        schema = publishing.coordinates_schema()
        writer.begin(schema)
        began = time.monotonic()
        try:
            publication = changelog.publish_staged(StagingArea(store), batch)
        except Exception as exc:
            if not _publishing_error(exc):
                raise
            _log.warning(
                "changelog of %s: publishing batch %d of query %s failed: %s",
                store,
                batch_id,
                query_id,
                exc,
            )
            reply = {"error": publishing.error_to_json(exc)}
            writer.write_metadata(pa.py_buffer(json.dumps(reply).encode()))
            return
        absent_parts, absent_offsets = publication.absent
        coordinates = [(absent_parts, absent_offsets), *publication.files]
        for parts, offsets in coordinates:
            writer.write_batch(
                pa.record_batch(
                    [pa.array(parts, pa.int32()), pa.array(offsets, pa.int64())], schema=schema
                )
            )
        produced = sum(len(parts) for parts, _ in coordinates)
        meta = {
            "ends": {str(p): o for p, o in publication.ends.items()},
            "stamp_ms": publication.stamp_ms,
            "report": [produced, time.monotonic() - began, 0.0],
        }
        writer.write_metadata(pa.py_buffer(json.dumps(meta).encode()))

    def published_totals(self) -> dict[str, tuple[int, int]]:
        """Per changelog topic, the batches this host published so far: while their tasks
        staged them, and at their commit (the first of a run, another attempt, ... see
        :mod:`~spark_statestore.connectors.kafka.sink.streamed`)."""
        with self._lock:
            totals = dict(self._retired)
            for changelog in self._changelogs.values():
                _add(totals, changelog)
        return totals

    def _retire(self, changelog: StreamedChangelog) -> None:
        """Keep a replaced or closed publisher's counts (under the lock)."""
        _add(self._retired, changelog)

    # -- upkeep -------------------------------------------------------------------------
    def close(self) -> None:
        """Abort open transactions and close the producers."""
        self._stopped.set()
        with self._lock:
            changelogs, self._changelogs = list(self._changelogs.values()), {}
            for changelog in changelogs:
                self._retire(changelog)
        for changelog in changelogs:
            with contextlib.suppress(Exception):
                changelog.close()

    def _keep_up(self) -> None:
        """Abort streamed transactions nobody finishes (see ``check_idle``)."""
        while not self._stopped.wait(UPKEEP_S):
            with self._lock:
                changelogs = list(self._changelogs.values())
            for changelog in changelogs:
                try:
                    changelog.check_idle()
                except Exception as exc:
                    _log.warning("store host: checking a changelog failed: %s", exc)

    def _check_token(self, request: Mapping[str, Any]) -> None:
        from spark_statestore.serve.errors import AuthenticationError

        token = request.get("commit_token")
        if (
            self._commit_token is None
            or not isinstance(token, str)
            or not hmac.compare_digest(token.encode(), self._commit_token.encode())
        ):
            raise AuthenticationError(
                f"store host {self._location}: publishing a changelog takes the commit token "
                "of its driver's processes",
                self._location,
            )


def _batch_of(request: Mapping[str, Any], what: str) -> tuple[str, int]:
    query_id, batch_id = request.get("query_id"), request.get("batch_id")
    if not isinstance(query_id, str) or isinstance(batch_id, bool) or not isinstance(batch_id, int):
        raise bad_request(f"{what}: query_id and batch_id are a string and an int")
    return query_id, batch_id


def _publishing_error(exc: BaseException) -> bool:
    """An error of publishing itself (Kafka's, the staged files'), as opposed to a refused
    call (bad request, authentication), which the caller gets as a Flight error."""
    from spark_statestore.errors import StateStoreError
    from spark_statestore.serve.errors import ServeError

    return isinstance(exc, StateStoreError) and not isinstance(exc, ServeError)


def _add(totals: dict[str, tuple[int, int]], changelog: StreamedChangelog) -> None:
    streamed, republished = totals.get(changelog.target.topic, (0, 0))
    totals[changelog.target.topic] = (
        streamed + changelog.streamed_batches,
        republished + changelog.republished_batches,
    )
