"""The ``metrics*`` options of the processes that own a store in Spark (a follower query's
driver-side process, a sink's store server): parsed into a
:class:`~spark_statestore.metrics.server.MetricsEndpoint`, with the endpoint's rules checked
when the query is defined (beyond loopback: TLS and a token, as the Flight servers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_statestore.connectors.spark.option_table import OptionReader
from spark_statestore.errors import OptionError

if TYPE_CHECKING:
    from spark_statestore.metrics.server import MetricsEndpoint

__all__ = ["METRICS_OPTIONS", "metrics_endpoint"]

METRICS_OPTIONS = (
    "metricsPort",
    "metricsHost",
    "metricsTlsCert",
    "metricsTlsKey",
    "metricsTokenFile",
)
"""Every option of the metrics endpoint."""


def metrics_endpoint(options: OptionReader) -> MetricsEndpoint | None:
    """The endpoint the ``metrics*`` options ask for (None without ``metricsPort``).

    Raises
    ------
    OptionError
        A port out of range, another ``metrics*`` option without ``metricsPort``, one of
        ``metricsTlsCert`` and ``metricsTlsKey`` without the other, or a ``metricsHost``
        beyond loopback without TLS and a token file.
    """
    from spark_statestore.metrics.server import MetricsEndpoint
    from spark_statestore.serve.auth import is_loopback

    port = options.integer("metricsPort")
    host = options.required("metricsHost")
    cert = options.text("metricsTlsCert")
    key = options.text("metricsTlsKey")
    token_file = options.text("metricsTokenFile")
    if port is None:
        given = [name for name in METRICS_OPTIONS[1:] if options.given(name)]
        if given:
            raise OptionError(
                f"option {given[0]!r} configures the metrics endpoint: set option "
                "'metricsPort' too (0: a free port), or drop it"
            )
        return None
    if port < 0:
        raise OptionError(f"option 'metricsPort' must be a port 0-65535, got {port}")
    if (cert is None) != (key is None):
        raise OptionError(
            "options 'metricsTlsCert' and 'metricsTlsKey' go together: give both (HTTPS) or neither"
        )
    if not is_loopback(host) and (cert is None or token_file is None):
        raise OptionError(
            f"option 'metricsHost' {host!r} is beyond loopback: the metrics endpoint needs TLS "
            "and a bearer token there, as the Flight servers do; give 'metricsTlsCert', "
            "'metricsTlsKey' and 'metricsTokenFile', or bind 127.0.0.1"
        )
    return MetricsEndpoint(port, host, cert, key, token_file, token_option="'metricsTokenFile'")
