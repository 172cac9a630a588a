"""What the follower source runs inside Spark's long-lived driver-side reader process.

One :class:`FollowerRuntime` per streaming query: it owns the store (the single-owner lock),
runs the :class:`~spark_statestore.follower.Follower` on a background thread, serves the
live store over Arrow Flight so snapshot reads of other queries go through it (its location
is recorded in the store's ``_owner.json``) and, unless option ``announce`` is false,
announces the replica on the changelog's ``<changelog>-replicas`` topic (replica discovery).
Spark kills that process on query stop without calling ``stop()``: nothing here relies on a
clean shutdown, because every store commit is atomic, the kernel releases the lock, and an
announcement nobody renews goes stale after its TTL.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping

from spark_statestore.connectors.kafka.discovery import ReplicaAnnouncer, announce_store
from spark_statestore.connectors.kafka.follower.leader import KafkaLeaderProgress
from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
from spark_statestore.connectors.spark.options import SourceOptions, StoreType
from spark_statestore.connectors.spark.serve_options import serving_endpoint
from spark_statestore.errors import FollowerError, OptionError, StateStoreError
from spark_statestore.follower import Follower, FollowerState
from spark_statestore.follower.versioned import history_retention_of
from spark_statestore.metrics import FollowerMetrics, MetricsServer
from spark_statestore.metrics.owner import serve_owner_metrics
from spark_statestore.query import LagInfo
from spark_statestore.serve import StoreServer
from spark_statestore.serve.auth import read_token_file
from spark_statestore.store import Role, Store, StoreSpec

__all__ = ["FollowerRuntime"]

_log = logging.getLogger(__name__)

END_OFFSETS_TTL_S = 1.0
"""How old the changelog's end offsets a query's progress reports may be."""


class FollowerRuntime:
    """The store, the follower thread and the Flight server of one follower query.

    Parameters
    ----------
    options
        The parsed source options.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._ends_asked_at = float("-inf")
        source = KafkaChangelogSource(
            options.bootstrap_servers,
            options.changelog,
            config=options.kafka,
            on_missing_position=options.on_missing_position,
            fail_on_data_loss=options.fail_on_data_loss,
        )
        closers: list[Callable[[], None]] = [source.close]
        try:
            count = source.partition_count()
            retention = None
            if options.store_type is StoreType.VERSIONED:
                retention = history_retention_of(source, options.history_retention_ms)
                if retention is None:
                    raise OptionError(
                        f"storeType 'versioned': changelog {options.changelog!r} does not say "
                        "its store's history retention (Kafka Streams sets its "
                        "min.compaction.lag.ms to the retention plus a day, unless the app "
                        "overrides it; it is under a day): check it is a versioned store's "
                        "changelog, and set option 'historyRetentionMs'"
                    )
            spec = StoreSpec(
                Role.FOLLOWER,
                options.changelog,
                count,
                held_partitions=options.partitions,
                key_prefix=options.key_prefix,
                history_retention_ms=retention,
            )
            self.store = Store.open(
                options.path,
                spec,
                purpose=f"Spark follower source of {options.changelog} (pid {os.getpid()})",
                serves=True,
            )
            closers.append(self.store.close)
            self.source = source
            leader = None
            if options.leader_application_id is not None:
                leader = KafkaLeaderProgress(
                    options.bootstrap_servers,
                    options.leader_application_id,
                    options.changelog,
                    count,
                    config=options.kafka,
                    topology=options.leader_topology,
                    upstream_topics=options.leader_upstream_topics,
                )
                closers.append(leader.close)
            self.leader = leader
            self.follower = Follower(self.store, source, leader=leader)
            endpoint = serving_endpoint(
                options.serve_host,
                tls_cert=options.serve_tls_cert,
                tls_key=options.serve_tls_key,
                tls_client_ca=options.serve_tls_client_ca,
            )
            self.server = StoreServer(
                self.store,
                host=endpoint.host,
                port=options.serve_port,
                lag_provider=self._lags,
                health_provider=self.follower.health,
                tls_certificates=endpoint.tls_certificates,
                tls_client_ca=endpoint.tls_client_ca,
                require_client_cert=endpoint.require_client_cert,
                token=_token(options),
            )
            location = self.server.start()
            closers.insert(0, self.server.close)
            self.store.update_owner(flight_location=location)
            self.follower.start()
            self.metrics = self._metrics()
            if self.metrics is not None:
                closers.insert(0, self.metrics.close)
            self.announcer = self._announcer(location) if options.announce else None
            if self.announcer is not None:
                closers.insert(0, self.announcer.close)
        except BaseException:
            for close in closers:
                close()
            raise
        _log.info(
            "following %s into %s (partitions %s), serving at %s",
            options.changelog,
            options.path,
            list(self.follower.partitions),
            location,
        )

    @property
    def partitions(self) -> tuple[int, ...]:
        """The changelog partitions the store holds and the feed delivers."""
        return self.follower.partitions

    def end_offsets(self) -> dict[int, int]:
        """The changelog's end offsets of the held partitions, asked of Kafka at most every
        :data:`END_OFFSETS_TTL_S` (the last known ones when Kafka does not answer)."""
        now = time.monotonic()
        if now - self._ends_asked_at >= END_OFFSETS_TTL_S:
            self._ends_asked_at = now
            try:
                self.follower.refresh_end_offsets()
            except StateStoreError as exc:
                _log.info("end offsets of %s unknown: %s", self.options.changelog, exc)
        applied = self.applied()
        ends = self.follower.end_offsets
        return {p: max(ends.get(p, 0), applied[p]) for p in self.partitions}

    def _lags(self) -> Mapping[int, LagInfo]:
        self.follower.refresh_end_offsets()
        return self.follower.lags()

    def _metrics(self) -> MetricsServer | None:
        """The follower's metrics endpoint (option ``metricsPort``), or None."""
        if self.options.metrics is None:
            return None
        return serve_owner_metrics(
            lambda registry: FollowerMetrics(self.follower, registry),
            self.server,
            self.options.metrics,
            what=f"the follower of {self.options.changelog}",
            health=self.follower.health,
        )

    def _announcer(self, location: str) -> ReplicaAnnouncer | None:
        """Announce the replica on ``<changelog>-replicas`` (None: Kafka refused)."""
        return announce_store(
            self.store,
            location,
            self._lags,
            bootstrap_servers=self.options.bootstrap_servers,
            config=self.options.kafka,
            interval_ms=self.options.announce_interval_ms,
            key_file=self.options.announce_key_file,
        )

    def check(self) -> None:
        """Raise the follower thread's error, if it failed."""
        if self.follower.state is FollowerState.FAILED:
            raise FollowerError(
                f"the follower of {self.options.changelog!r} into {self.options.path} failed: "
                f"{self.follower.error}"
            ) from self.follower.error

    def applied(self) -> dict[int, int]:
        """``{partition: next offset}`` the store has committed, for the held partitions."""
        offsets = self.store.metadata.changelog_offsets
        return {p: offsets.get(p, 0) for p in self.partitions}

    def close(self) -> None:
        """Withdraw the announcement, stop serving and following, and close the store
        (idempotent)."""
        if self.announcer is not None:
            self.announcer.close()
        if self.metrics is not None:
            self.metrics.close()
        self.server.close()
        self.follower.stop()
        if self.leader is not None:
            self.leader.close()
        self.store.close()


def _token(options: SourceOptions) -> str | None:
    """The ``serveTokenFile``'s token, or None (the server draws a random one)."""
    if options.serve_token_file is None:
        return None
    return read_token_file(options.serve_token_file, "'serveTokenFile'")
