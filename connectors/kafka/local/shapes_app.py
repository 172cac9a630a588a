"""The interop jar's ``ShapesApp``: Kafka Streams topologies of several sub-topologies.

In each of its shapes an internal topic sits between the input topics and the store: a
``groupBy`` to a new key, a stream-table join after a key change, a foreign-key join, a
windowed count after a ``groupBy``, two repartitions in a row. The first sub-topology commits
an input offset in the transaction that writes the internal topic; the store's sub-topology
applies the record in a later one (DESIGN.md §5, "Several sub-topologies"). The app runs
exactly-once v2, with or without position headers, and answers Kafka Streams' own IQv2
queries (:meth:`StreamsApp.query`: ``range`` / ``trange`` for the key-value stores,
``windows`` for ``windowed``); see ``ShapesApp.java`` for the topologies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spark_statestore.connectors.kafka.errors import StreamsAppError
from spark_statestore.connectors.kafka.local.streams_app import StreamsApp
from spark_statestore.errors import closest_hint

__all__ = ["SHAPES", "SHAPES_APP", "SHAPES_INPUTS", "StreamsShapes"]

SHAPES_APP = "io.sparkstatestore.interop.ShapesApp"
"""The main class of the app of several sub-topologies (:class:`StreamsShapes`)."""
SHAPES = ("regroup", "joined", "fkjoined", "windowed", "chained")
"""Its shapes, each one store of that name, logged to ``<application id>-<store>-changelog``:

``regroup``
    Orders ``groupBy`` their key's prefix (the part before ``:``, the whole key if none),
    counted: behind the repartition topic ``<application id>-regroup-repartition``.
``joined``
    Orders re-keyed by their prefix, inner-joined with the labels table, counted per prefix:
    behind the join's repartition topic (orders whose prefix has no label are dropped).
``fkjoined``
    The shipments table (shipment -> customer) joined by foreign key with the customers table
    (customer -> region), value ``"<region>/<customer>"``: behind the join's
    subscription-registration and subscription-response topics; a tombstone of either side
    deletes joined rows.
``windowed``
    Orders ``groupBy`` their prefix, counted per tumbling window (a window store): behind
    ``<application id>-windowed-repartition``.
``chained``
    Orders re-keyed by their prefix, repartitioned (``hop``), re-keyed again and counted:
    behind ``<application id>-hop-repartition`` then ``<application id>-chained-repartition``.
"""
SHAPES_INPUTS = ("orders", "labels", "shipments", "customers")
"""Its input topics, by role: orders (key: customer id, value: amount as an 8-byte big-endian
long), labels (key: prefix, value: label), shipments (key: shipment id, value: customer id),
customers (key: customer id, value: region); keys and string values in UTF-8."""


class StreamsShapes(StreamsApp):
    """Kafka Streams running the topologies of several sub-topologies (``ShapesApp``).

    Parameters
    ----------
    bootstrap_servers
        The Kafka cluster.
    state_dir
        Kafka Streams' state directory.
    inputs
        The input topic of each role of :data:`SHAPES_INPUTS` (they must exist; the roles not
        given keep the app's defaults, topics named as the roles).
    shapes
        Which of :data:`SHAPES` to run (default all), in one topology.
    application_id
        Its ``application.id``: consumer group, prefix of its internal topics and changelogs.
    position_headers
        Turn on Kafka Streams' internal consistency option (``v``/``c`` headers).
    window_ms
        The size of the tumbling windows of ``windowed`` (the app's default: a minute).
    settings
        Other ``--name value`` options of the app (``commit-interval-ms``,
        ``session-timeout-ms``, ``retention-ms``).
    log_path
        Where the JVM's stderr goes.

    Raises
    ------
    StreamsAppError
        An unknown shape or input role (naming the closest valid one), or no shape at all.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        state_dir: Path,
        *,
        inputs: Mapping[str, str],
        shapes: Sequence[str] = SHAPES,
        application_id: str = "interop-shapes",
        position_headers: bool = True,
        window_ms: int | None = None,
        settings: Mapping[str, Any] | None = None,
        log_path: Path | None = None,
    ) -> None:
        for role in inputs:
            if role not in SHAPES_INPUTS:
                raise StreamsAppError(
                    f"unknown input {role!r}" + closest_hint(role, SHAPES_INPUTS, noun="inputs")
                )
        for shape in shapes:
            if shape not in SHAPES:
                raise StreamsAppError(
                    f"unknown shape {shape!r}" + closest_hint(shape, SHAPES, noun="shapes")
                )
        if not shapes:
            raise StreamsAppError(f"no shape to run: name some of {', '.join(SHAPES)}")
        self.shapes = tuple(dict.fromkeys(shapes))
        self.inputs = dict(inputs)
        super().__init__(
            bootstrap_servers,
            state_dir,
            application_id=application_id,
            input_topic=None,
            position_headers=position_headers,
            settings={
                **{f"{role}-topic": topic for role, topic in inputs.items()},
                "shapes": ",".join(self.shapes),
                **({"window-ms": window_ms} if window_ms is not None else {}),
                **(settings or {}),
            },
            log_path=log_path,
            main_class=SHAPES_APP,
        )
