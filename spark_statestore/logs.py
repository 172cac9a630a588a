"""Logging of the processes spark-statestore owns: one handler, text or JSON lines.

Every module logs through ``logging.getLogger(__name__)``, so all of the project's records
come from one logger tree, ``spark_statestore`` (the connectors are installed as
``spark_statestore.connectors``; librdkafka's own lines arrive under
``spark_statestore.connectors.kafka.logs``). Importing the package configures nothing: a program
that embeds it (a Spark application, a notebook) keeps its own logging.

:func:`configure_logging` is for the processes that are ours: the ``spark-statestore``
command and the detached server processes the Spark connectors start. It chooses the level
of the tree and the format of every record:

- ``text``: ``2026-11-28 16:52:01,123 WARNING spark_statestore.x: message``, a traceback
  on the lines after it when there is one;
- ``json``: one JSON object per line (:class:`JsonFormatter`), for a log collector.

``SPARK_STATESTORE_LOG_FORMAT`` (``text`` or ``json``) and ``SPARK_STATESTORE_LOG_LEVEL``
(``DEBUG``, ``INFO``, ``WARNING``, ``ERROR``, ``CRITICAL``) choose them when the program's
flags do not.

Nothing here imports Spark or Kafka.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
import traceback
from collections.abc import Mapping
from typing import Any, TextIO

from spark_statestore.errors import OptionError, closest_hint

__all__ = [
    "FORMATS",
    "LEVELS",
    "LOG_FORMAT_ENV",
    "LOG_LEVEL_ENV",
    "JsonFormatter",
    "configure_logging",
    "log_format",
    "log_level",
]

LOG_FORMAT_ENV = "SPARK_STATESTORE_LOG_FORMAT"
LOG_LEVEL_ENV = "SPARK_STATESTORE_LOG_LEVEL"
FORMATS = ("text", "json")
"""The log formats :func:`configure_logging` writes."""
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
"""The level names :func:`log_level` takes (any case)."""

TREE = "spark_statestore"
"""The logger every module of the project logs under."""

_TEXT = "%(asctime)s %(levelname)s %(name)s{process}: %(message)s"
# The attributes every LogRecord has; any other attribute came as ``extra``.
_STANDARD = frozenset(
    {
        *logging.LogRecord("", 0, "", 0, "", (), None).__dict__,
        "message",
        "asctime",
        "taskName",
    }
)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line.

    Fields: ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``, ``message`` (its
    arguments merged in), then the formatter's own ``fields`` and every ``extra`` field the
    call gave (``store``, ``topic``, ``partition``, ...; values JSON cannot hold are
    written as their ``str``; one named like a field above is written as ``extra_<name>``),
    and with an exception ``exc_type`` (its class's qualified name) and ``exc`` (the
    traceback's text), with a stack ``stack``. Line breaks in any
    value are escaped, and so is every non-ASCII character: a line stays one valid JSON
    object whatever the encoding of the stream it is written to.

    Parameters
    ----------
    fields
        Fields added to every line (e.g. the process's name and pid); a record's own fields
        win over them.
    """

    _OWN = ("time", "level", "logger", "message", "exc_type", "exc", "stack")

    def __init__(self, fields: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self._fields = dict(fields or {})

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _utc_iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in self._fields.items():
            line.setdefault(name, value)
        for name, value in record.__dict__.items():
            if name in _STANDARD or name.startswith("_"):
                continue
            # A field named like one of ours keeps its value under another name.
            line["extra_" + name if name in self._OWN else name] = value
        if record.exc_info and record.exc_info[0] is not None:
            exc_type = record.exc_info[0]
            line["exc_type"] = f"{exc_type.__module__}.{exc_type.__qualname__}"
            line["exc"] = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        elif record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, ensure_ascii=True, default=str)


def _utc_iso(created: float) -> str:
    moment = datetime.datetime.fromtimestamp(created, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Handler(logging.StreamHandler[TextIO]):
    """The handler :func:`configure_logging` installs (found again by its class). Without a
    stream of its own it writes to ``sys.stderr`` as it is when a record comes, as
    ``logging.lastResort`` does, so a program that swaps stderr later is followed."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(stream)
        self._own_stream = stream

    @property
    def stream(self) -> TextIO:
        return self._own_stream if self._own_stream is not None else sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        self._own_stream = value


def log_format(fmt: str | None = None) -> str:
    """The log format: ``fmt`` when given, else ``$SPARK_STATESTORE_LOG_FORMAT``, else
    ``text``.

    Raises
    ------
    OptionError
        The value is not one of :data:`FORMATS`; the message names where it came from.
    """
    where = "log format "
    if fmt is None:
        fmt = os.environ.get(LOG_FORMAT_ENV, "").strip()
        where = f"environment variable {LOG_FORMAT_ENV}="
        if not fmt:
            return "text"
    if fmt.lower() in FORMATS:
        return fmt.lower()
    raise OptionError(
        f"{where}{fmt[:40]!r} is not a log format" + closest_hint(fmt, FORMATS, noun="values")
    )


def log_level(level: int | str | None = None, *, default: int = logging.WARNING) -> int:
    """The level of the ``spark_statestore`` tree: ``level`` when given (a number or a
    name of :data:`LEVELS`), else ``$SPARK_STATESTORE_LOG_LEVEL``, else ``default``.

    Raises
    ------
    OptionError
        The name is not one of :data:`LEVELS`; the message names where it came from.
    """
    where = "log level "
    if level is None:
        level = os.environ.get(LOG_LEVEL_ENV, "").strip()
        where = f"environment variable {LOG_LEVEL_ENV}="
        if not level:
            return default
    if isinstance(level, int):
        return level
    if level.upper() in LEVELS:
        return int(getattr(logging, level.upper()))
    raise OptionError(
        f"{where}{level[:40]!r} is not a log level" + closest_hint(level, LEVELS, noun="values")
    )


def configure_logging(
    level: int | str | None = None,
    fmt: str | None = None,
    *,
    stream: TextIO | None = None,
    default_level: int = logging.WARNING,
    process: str | None = None,
    force: bool = False,
) -> logging.Handler | None:
    """Log every record of this process through one handler, as text or JSON lines.

    For processes that are ours only (the ``spark-statestore`` command, a detached server):
    it configures the *root* logger, so that the records of every library (py4j, pyarrow,
    urllib3, ...) come in the same format (a JSON stream stays JSON) and through the same
    handler, and it sets the ``spark_statestore`` tree to ``level``. Other libraries stay
    at WARNING: ``--verbose`` is about this project, not about py4j's sockets. Python's
    ``warnings`` are logged too (``py.warnings``). A library import never calls this.

    As :func:`logging.basicConfig`, it leaves a process whose root logger has handlers
    already (an embedding program, a test harness) alone, unless ``force``; a second call
    replaces the handler of the first.

    Parameters
    ----------
    level
        The tree's level (a number, or a name of :data:`LEVELS`); None: as
        :func:`log_level` (``$SPARK_STATESTORE_LOG_LEVEL``, else ``default_level``).
    fmt
        ``text`` or ``json``; None: as :func:`log_format` (``$SPARK_STATESTORE_LOG_FORMAT``,
        else ``text``).
    stream
        Where the lines go; None: ``sys.stderr`` (as it is at each record).
    default_level
        The level when neither ``level`` nor the environment gives one.
    process
        Names the process on every line (``name pid`` in text, ``process`` and ``pid``
        fields in JSON): for the log file detached servers share.
    force
        Install the handler even when the root logger has others (they stay).

    Returns
    -------
    logging.Handler or None
        The handler installed; None when the process's logging was left alone.

    Raises
    ------
    OptionError
        ``level`` or ``fmt`` (or the variable standing for it) is not a valid value.
    """
    chosen_level = log_level(level, default=default_level)
    chosen_format = log_format(fmt)
    root = logging.getLogger()
    ours = [handler for handler in root.handlers if isinstance(handler, _Handler)]
    if not force and len(ours) < len(root.handlers):
        return None
    handler = _Handler(stream)
    if chosen_format == "json":
        fields = {} if process is None else {"process": process, "pid": os.getpid()}
        handler.setFormatter(JsonFormatter(fields))
    else:
        named = "" if process is None else f" ({process.replace('%', '%%')} %(process)d)"
        handler.setFormatter(logging.Formatter(_TEXT.format(process=named)))
    for old in ours:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger(TREE).setLevel(chosen_level)
    logging.captureWarnings(True)
    return handler
