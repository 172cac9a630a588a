"""Building Kafka clients and asking Kafka about topics: one place for every binding.

* :func:`consumer` and :func:`producer` build clients from our defaults, the purpose's own
  defaults and the user's ``kafka.*`` settings (which win, except the isolation level of a
  reading consumer: read_committed always, so aborted transactions never reach a store), and
  name what the client is for when librdkafka refuses the settings.
* :func:`partition_count` asks a topic's partition count, :func:`topic_config` its
  settings; :func:`watermarks` where a partition begins and ends, through leader changes and
  restarts.
* librdkafka's log lines go through Python logging (:mod:`.logs`): every client made here
  has them :func:`~.logs.routed` to ``spark_statestore.connectors.kafka.logs``, or, when nobody
  polls it (admin clients, a consumer made ``quiet``), kept :func:`~.logs.quiet`.
* When the brokers do not answer, :func:`unreachable_cause` asks a fresh client why
  (librdkafka reports a refused password, an unverifiable certificate or a listener of
  another protocol as an event, and the failed call only as a transport failure), so the
  error names the ``kafka.*`` options to check instead of a bare timeout.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

from spark_statestore.connectors.kafka import logs
from spark_statestore.connectors.kafka.errors import (
    KafkaClientError,
    client_error,
    describe_error,
    is_transient,
    kafka_error_of,
)

__all__ = [
    "admin",
    "consumer",
    "consumer_settings",
    "ensure_topic",
    "partition_count",
    "producer",
    "settings_hint",
    "topic_config",
    "unreachable_cause",
    "watermarks",
]

_WATERMARK_ATTEMPT_S = 5.0

_CONSUMER_ONLY = (
    "isolation.level",
    "auto.offset.reset",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.partition.eof",
    "fetch.max.bytes",
    "queued.max.messages.kbytes",
    "queued.min.messages",
    "group.id",
)

CLIENT_DEFAULTS: dict[str, Any] = {
    # librdkafka's first request on a new client waits about reconnect.backoff.ms (100 ms)
    # for the connection to the broker the bootstrap metadata names: measured 57 ms per
    # fresh client, 17 ms with 10 ms. A sink commit process makes three fresh clients per
    # micro-batch. The backoff still grows exponentially to reconnect.backoff.max.ms (10 s)
    # against a broker that is down.
    "reconnect.backoff.ms": 10,
}
"""Defaults of every client here (the user's ``kafka.*`` settings override them)."""

_CONSUMER_DEFAULTS: dict[str, Any] = {
    **CLIENT_DEFAULTS,
    "enable.auto.commit": False,  # offsets are never committed: stores keep their own
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
}


class _Consumer(Consumer):
    """A confluent-kafka ``Consumer`` that keeps its settings, for :func:`unreachable_cause`."""

    kafka_settings: Mapping[str, Any]


class _Producer(Producer):
    """A confluent-kafka ``Producer`` that keeps its settings, for :func:`unreachable_cause`."""

    kafka_settings: Mapping[str, Any]


def consumer(
    bootstrap_servers: str,
    config: Mapping[str, Any] | None,
    *,
    group: str,
    what: str,
    defaults: Mapping[str, Any] | None = None,
    read_committed: bool = True,
    quiet: bool = False,
) -> Consumer:
    """A consumer of ``bootstrap_servers``, never joining ``group`` (a required id), with
    the settings of :func:`consumer_settings`, its librdkafka lines :func:`~.logs.routed`
    to Python logging, or :func:`~.logs.quiet` with ``quiet``: for a consumer that is never
    or rarely polled (one that only asks for offsets and metadata), whose lines would wait
    in its queue (20 to 80 a second while its broker is down) until it is.

    Raises
    ------
    KafkaClientError
        As :func:`consumer_settings`, or librdkafka refuses the settings.
    """
    settings = consumer_settings(
        bootstrap_servers,
        config,
        group=group,
        what=what,
        defaults=defaults,
        read_committed=read_committed,
    )
    settings = logs.quiet(settings) if quiet else logs.routed(settings)
    try:
        client = _Consumer(settings)
    except KafkaException as exc:
        raise client_error(
            exc,
            f"the Kafka client refused the consumer settings for {what}",
            settings_hint(settings),
        ) from exc
    client.kafka_settings = settings
    return client


def consumer_settings(
    bootstrap_servers: str,
    config: Mapping[str, Any] | None,
    *,
    group: str,
    what: str,
    defaults: Mapping[str, Any] | None = None,
    read_committed: bool = True,
) -> dict[str, Any]:
    """The settings of a consumer of ``bootstrap_servers``, never joining ``group``.

    Parameters
    ----------
    config
        The user's ``kafka.*`` settings (prefix removed); they override the defaults.
    group
        The ``group.id`` librdkafka requires; no offsets are committed under it.
    what
        What it reads, for error messages (e.g. ``changelog 'app-store-changelog'``).
    defaults
        This reader's own defaults (fetch sizes, ``auto.offset.reset``).
    read_committed
        False only for a client that asks where a log ends and reads no record.

    Raises
    ------
    KafkaClientError
        ``config`` sets another isolation level for a reading consumer.
    """
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": group,
        **_CONSUMER_DEFAULTS,
        **(defaults or {}),
        **(config or {}),
    }
    if not read_committed:
        settings["isolation.level"] = "read_uncommitted"
    elif settings.get("isolation.level", "read_committed") != "read_committed":
        raise KafkaClientError(
            f"{what} must be read with isolation.level=read_committed (aborted transactions "
            f"must never count), got {settings['isolation.level']!r}; remove that setting"
        )
    else:
        settings["isolation.level"] = "read_committed"
    return settings


def producer(bootstrap_servers: str, config: Mapping[str, Any] | None, *, what: str) -> Producer:
    """A producer of ``bootstrap_servers`` with the user's ``kafka.*`` settings, its
    librdkafka lines :func:`~.logs.routed` to Python logging (served by its ``poll`` and
    ``flush``).

    Raises
    ------
    KafkaClientError
        librdkafka refuses the settings (the message names ``what``).
    """
    settings = logs.routed(
        {"bootstrap.servers": bootstrap_servers, **CLIENT_DEFAULTS, **(config or {})}
    )
    try:
        client = _Producer(settings)
    except KafkaException as exc:
        raise client_error(
            exc,
            f"the Kafka client refused the producer settings for {what}",
            settings_hint(settings),
        ) from exc
    client.kafka_settings = settings
    return client


def partition_count(client: Producer | Consumer, topic: str, timeout_s: float) -> int | None:
    """The partition count of ``topic``, None when it does not exist.

    Raises
    ------
    KafkaClientError
        The cluster's metadata cannot be read, or the topic's carries another error than
        "unknown topic" (not authorized to describe it, say): whether it exists is unknown.
    """
    try:
        metadata = client.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        raise unreachable_error(
            client,
            exc,
            f"cannot read the metadata of topic {topic!r}",
            "; check kafka.bootstrap.servers",
        ) from exc
    info = metadata.topics.get(topic)
    if info is None:
        return None
    if info.error is not None:
        if info.error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            return None
        raise KafkaClientError(
            f"cannot describe topic {topic!r}: {describe_error(info.error)}",
            info.error.code(),
        )
    return len(info.partitions) or None


def admin(bootstrap_servers: str, config: Mapping[str, Any] | None) -> AdminClient:
    """An AdminClient of ``bootstrap_servers`` with the user's ``kafka.*`` settings (its
    consumer-only ones left out: an AdminClient warns about each), :func:`~.logs.quiet`:
    nothing polls an admin client (its answers come from a background thread), so its
    librdkafka lines could never reach Python logging; the failed call says what failed."""
    from confluent_kafka.admin import AdminClient

    settings = {"bootstrap.servers": bootstrap_servers, **CLIENT_DEFAULTS, **(config or {})}
    for name in _CONSUMER_ONLY:
        settings.pop(name, None)
    settings = logs.quiet(settings)
    try:
        return AdminClient(settings)
    except KafkaException as exc:
        raise client_error(
            exc, "the Kafka client refused the admin settings", settings_hint(settings)
        ) from exc


def ensure_topic(
    bootstrap_servers: str,
    config: Mapping[str, Any] | None,
    topic: str,
    *,
    partitions: int,
    topic_config: Mapping[str, str],
    timeout_s: float,
) -> bool:
    """Create ``topic`` with ``partitions`` and ``topic_config`` (the brokers' default
    replication factor) unless it exists; True when this call created it.

    Raises
    ------
    KafkaClientError
        The topic cannot be created (refused authorization, an unreachable cluster).
    """
    from confluent_kafka import KafkaError
    from confluent_kafka.cimpl import NewTopic

    client = admin(bootstrap_servers, config)
    new = NewTopic(topic, partitions, -1, config=dict(topic_config))
    try:
        futures = client.create_topics([new], request_timeout=timeout_s)
        futures[topic].result(timeout=timeout_s)
    except KafkaException as exc:
        error = kafka_error_of(exc)
        if error is not None and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise client_error(
            exc, f"cannot create topic {topic!r}", "; create it yourself or allow CreateTopics"
        ) from exc
    return True


def topic_config(
    bootstrap_servers: str, config: Mapping[str, Any] | None, topic: str, timeout_s: float
) -> dict[str, str]:
    """The settings of ``topic`` (``cleanup.policy``, ``min.compaction.lag.ms``, ...) as the
    brokers report them, defaults included.

    Raises
    ------
    KafkaClientError
        The topic does not exist or its settings cannot be read.
    """
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # documented, not re-exported for mypy
        ConfigResource,
        ResourceType,
    )

    try:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        # The client must outlive the answer: dropping it cancels its requests.
        client = admin(bootstrap_servers, config)
        futures = client.describe_configs([resource], request_timeout=timeout_s)
        entries = futures[resource].result(timeout=timeout_s)
    except KafkaException as exc:
        raise client_error(exc, f"cannot read the settings of topic {topic!r}") from exc
    return {name: str(entry.value) for name, entry in entries.items() if entry.value is not None}


def watermarks(consumer: Consumer, topic: str, partition: int, timeout_s: float) -> tuple[int, int]:
    """``(earliest, end)`` of a partition: ``end`` is the last stable offset for a read_committed
    consumer, the end of the log for a read_uncommitted one.

    A client asks the leader it last heard of; after a leader change or a broker restart
    that request can wait out its whole timeout. So each attempt is short, and a transient
    failure refreshes the topic's metadata before the next one, until ``timeout_s``.
    """
    tp = TopicPartition(topic, partition)
    deadline = time.monotonic() + timeout_s
    while True:
        attempt = max(0.1, min(_WATERMARK_ATTEMPT_S, deadline - time.monotonic()))
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=attempt)
            return int(low), int(high)
        except KafkaException as exc:
            error = kafka_error_of(exc)
            if error is None or not is_transient(error) or time.monotonic() >= deadline:
                raise unreachable_error(
                    consumer, exc, f"cannot read the offsets of {topic}-{partition}"
                ) from exc
        with contextlib.suppress(KafkaException):
            consumer.list_topics(topic, timeout=max(0.1, min(attempt, deadline - time.monotonic())))


# Settings of Kafka's Java client that librdkafka does not have (Spark's Kafka source takes
# them), and what to give this plugin's clients instead.
_JAVA_CLIENT_ONLY = {
    "sasl.jaas.config": (
        "kafka.sasl.mechanism with kafka.sasl.username and kafka.sasl.password (PLAIN, "
        "SCRAM), or kafka.sasl.oauthbearer.* settings"
    ),
    "ssl.truststore.location": "kafka.ssl.ca.location (a PEM file of the brokers' CA)",
    "ssl.truststore.password": "kafka.ssl.ca.location (a PEM file of the brokers' CA)",
    "ssl.truststore.type": "kafka.ssl.ca.location (a PEM file of the brokers' CA)",
    "ssl.keystore.type": (
        "kafka.ssl.keystore.location and kafka.ssl.keystore.password (PKCS#12), or "
        "kafka.ssl.certificate.location and kafka.ssl.key.location (PEM)"
    ),
}


def settings_hint(settings: Mapping[str, Any]) -> str:
    """What to check when librdkafka refuses ``settings``: the ``kafka.*`` options, and for
    each setting only Kafka's Java client has, what this plugin's clients take instead."""
    java = [name for name in settings if name in _JAVA_CLIENT_ONLY]
    if not java:
        return "; check the kafka.* options"
    instead = "; ".join(f"instead of kafka.{name}, give {_JAVA_CLIENT_ONLY[name]}" for name in java)
    return (
        "; check the kafka.* options: this plugin's Kafka clients are librdkafka's (as "
        f"confluent-kafka's), not Kafka's Java client: {instead}"
    )


# What librdkafka reports when the brokers do not answer a request: the call itself fails
# with one of these; the reason is an event of its own (see unreachable_cause).
_UNANSWERED = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
    }
)
_CAUSE_PROBE_S = 3.0
_CAUSE_ATTEMPT_S = 0.25  # a refused login is reported ~0.3 s after the client starts
# Not a connection's business: the probe is a plain producer with the connection settings.
_NOT_FOR_THE_PROBE = frozenset(
    {*_CONSUMER_ONLY, "transactional.id", "enable.idempotence", "client.id", "logger"}
)


def unreachable_error(
    client: Any, exc: KafkaException, what: str, hint: str = ""
) -> KafkaClientError:
    """The error for a request of ``client`` that failed with ``exc``: when the brokers did
    not answer and the client keeps its settings (the clients made here do), with the cause
    :func:`unreachable_cause` finds and the options to check; else :func:`client_error`'s,
    with ``hint``."""
    error = kafka_error_of(exc)
    settings = getattr(client, "kafka_settings", None)
    if error is not None and error.code() in _UNANSWERED and settings is not None:
        cause = unreachable_cause(settings)
        if cause is not None:
            reason, hint = cause
            return KafkaClientError(
                f"{what}: {describe_error(error, exc)}; librdkafka reported while connecting: "
                f"{reason}; {hint}",
                error.code(),
            )
    return client_error(exc, what, hint)


def unreachable_cause(
    settings: Mapping[str, Any], timeout_s: float = _CAUSE_PROBE_S
) -> tuple[str, str] | None:
    """Why a client with ``settings`` gets no answer from its brokers: ``(what librdkafka
    reported while connecting, the kafka.* options to check)``, asked of a fresh producer
    with the same connection settings within ``timeout_s``; None when it reports nothing
    but "all brokers are down", or the brokers answer it.

    A wrong password, a certificate the client cannot verify and a listener of another
    protocol reach the application only as error events (and as lines librdkafka logs); the
    request that failed says "transport failure".
    """
    errors: list[KafkaError] = []
    probe_settings = {
        name: value
        for name, value in settings.items()
        if name not in _NOT_FOR_THE_PROBE and not callable(value)
    }
    # Quiet: the client that failed has logged the same connection errors already.
    probe_settings.update({"error_cb": errors.append, "log_level": 0})
    try:
        probe = Producer(probe_settings)
    except KafkaException:
        return None
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            probe.list_topics(timeout=_CAUSE_ATTEMPT_S)
        except KafkaException:
            probe.poll(0)  # serves the error events
        else:
            return None  # it answers now: the failure was transient
        for error in errors:
            if error.code() != KafkaError._ALL_BROKERS_DOWN:
                return f"{error.str()} ({error.name()})", _cause_hint(error)
        if time.monotonic() >= deadline:
            return None


_TLS_WORDS = ("SSL handshake failed", "certificate verify failed", "ssl.ca.location")


def _cause_hint(error: KafkaError) -> str:
    code, text = error.code(), error.str()
    if code == KafkaError._AUTHENTICATION:
        return (
            "check kafka.sasl.mechanism, kafka.sasl.username and kafka.sasl.password "
            "(librdkafka's names, not the Java client's sasl.jaas.config)"
        )
    if "PLAINTEXT broker listener" in text:
        return "check kafka.security.protocol: that listener does not speak TLS"
    # A failed handshake comes as _SSL or as _TRANSPORT, depending on where it failed.
    if code == KafkaError._SSL or any(word in text for word in _TLS_WORDS):
        return (
            "check kafka.ssl.ca.location (a PEM file of the CA that signed the brokers' "
            "certificates) and kafka.security.protocol"
        )
    return "check kafka.bootstrap.servers and kafka.security.protocol"
