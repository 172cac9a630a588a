"""librdkafka's log lines: through Python logging, or kept to librdkafka.

librdkafka, left to itself, prints its lines straight to stderr (``%3|1795885350.958|FAIL|
rdkafka#consumer-1| ...: Connect to ipv4#127.0.0.1:9092 failed: Connection refused``): while
a broker is stopped, an idle consumer prints such a line 20 to 80 times a second, into a
user's terminal or a Spark executor's log. So every client this package makes sends them
somewhere else:

* :func:`routed` settings give confluent-kafka's ``logger`` setting :class:`LibrdkafkaLog`,
  which logs each line under ``spark_statestore.connectors.kafka.logs`` (see
  :mod:`spark_statestore.logs`): a lost or refused connection to a broker at DEBUG (the
  failed call itself reports what matters), every other line at its own level (librdkafka's
  syslog level as confluent-kafka maps it). confluent-kafka queues the lines and hands them
  over when the client is polled (``poll``, ``consume``, ``flush``): for the clients that
  read or write records.
* :func:`quiet` settings are for a client whose lines could not reach Python: nobody polls
  it (an AdminClient, a consumer that only asks for offsets and metadata; the queue of an
  idle consumer grows by those 20 to 80 lines a second while its broker is down) or it is
  the compiled extension's, which has no log callback. librdkafka keeps all but its
  critical lines to itself (``log_level`` 2); what failed comes back as the error of the
  call. A ``kafka.log_level`` or ``kafka.logger`` the user gives wins (a ``log_level``
  without a logger prints librdkafka's lines to stderr again, for debugging).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["LOGGER_NAME", "QUIET_LOG_LEVEL", "LibrdkafkaLog", "librdkafka_level", "quiet", "routed"]

LOGGER_NAME = __name__
"""The logger librdkafka's lines come under."""

QUIET_LOG_LEVEL = 2
"""librdkafka's ``log_level`` for a :func:`quiet` client: only critical lines (syslog 0-2)."""

# librdkafka's lines about a broker it cannot reach or has lost: its "FAIL" facility (every
# connection failure and disconnect) and the same words elsewhere ("1/1 brokers are down",
# a metadata request's "Broker transport failure").
_CONNECTION_FACILITIES = frozenset({"FAIL"})
_CONNECTION_WORDS = (
    "Connect to ",
    "Disconnected",
    "brokers are down",
    "Connection refused",
    "Connection reset",
    "Broker transport failure",
    "Receive failed",
    "Send failed",
    "Failed to resolve",
)
# ... except those that say the connection was refused for its credentials or its TLS
# (any case): settings to fix, not a broker that is away.
_SETTINGS_WORDS = ("sasl", "ssl", "authentication", "certificate")


def librdkafka_level(level: int, facility: str, text: str) -> int:
    """The Python level of a librdkafka line: DEBUG for a lost or refused connection to a
    broker (not for a refused login or TLS handshake), else ``level`` (librdkafka's, as
    confluent-kafka maps it)."""
    lowered = text.lower()
    if any(word in lowered for word in _SETTINGS_WORDS):
        return level
    if facility in _CONNECTION_FACILITIES or any(word in text for word in _CONNECTION_WORDS):
        return logging.DEBUG
    return level


class LibrdkafkaLog:
    """What confluent-kafka's ``logger`` setting takes: it calls ``log(level, "%s [%s] %s",
    facility, client name, text)`` for each librdkafka line, from the thread that polls the
    client. Logged under :data:`LOGGER_NAME` at :func:`librdkafka_level`, with the fields
    ``facility`` and ``client`` (e.g. ``FAIL``, ``rdkafka#consumer-1``).

    Parameters
    ----------
    logger
        Where the lines go; default: the ``spark_statestore.connectors.kafka.logs`` logger.
    """

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger if logger is not None else logging.getLogger(LOGGER_NAME)

    def log(self, level: int, msg: str, *args: Any) -> None:
        extra = None
        if len(args) == 3:
            facility, client, text = (str(arg) for arg in args)
            level = librdkafka_level(level, facility, text)
            extra = {"facility": facility, "client": client}
        self.logger.log(level, msg, *args, extra=extra)

    def __repr__(self) -> str:
        return f"LibrdkafkaLog({self.logger.name!r})"


_LOG = LibrdkafkaLog()


def routed(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with librdkafka's lines sent to Python logging (``logger``:
    :class:`LibrdkafkaLog`), unless they name a logger of their own. For a client that is
    polled: its lines wait in its queue until then."""
    out = dict(settings)
    out.setdefault("logger", _LOG)
    return out


def quiet(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with librdkafka keeping all but critical lines to itself (``log_level``
    :data:`QUIET_LOG_LEVEL`), unless they set a ``log_level`` or a ``logger``. For a client
    that nobody polls, or that cannot take a Python logger (the compiled extension's)."""
    out = dict(settings)
    if "logger" not in out:
        out.setdefault("log_level", QUIET_LOG_LEVEL)
    return out
