"""The logs of our processes (spark_statestore/logs.py) and librdkafka's lines
(connectors/kafka/logs.py): JSON lines, the choice of format and level, and librdkafka's
lines through Python logging, a lost broker at DEBUG. No broker is contacted here."""

from __future__ import annotations

import datetime
import io
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka import logs as kafka_logs
from spark_statestore.connectors.kafka.follower.columns import native_settings
from spark_statestore.errors import OptionError
from spark_statestore.logs import (
    LOG_FORMAT_ENV,
    LOG_LEVEL_ENV,
    JsonFormatter,
    configure_logging,
    log_format,
    log_level,
)
from tests.conftest import REPO_ROOT

_NOWHERE = "127.0.0.1:1"
_REFUSED = (
    "127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused "
    "(after 0ms in state CONNECT)"
)


def _record(message: str, *args: object, exc: bool = False, **extra: object) -> logging.LogRecord:
    logger = logging.getLogger("spark_statestore.test")
    exc_info = None
    if exc:
        try:
            raise OptionError("bad\nvalue")
        except OptionError:
            exc_info = sys.exc_info()
    return logger.makeRecord(
        logger.name, logging.WARNING, __file__, 1, message, args, exc_info, extra=extra
    )


@pytest.fixture
def clean_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The root logger, the tree's level and the environment as they were, afterwards."""
    monkeypatch.delenv(LOG_FORMAT_ENV, raising=False)
    monkeypatch.delenv(LOG_LEVEL_ENV, raising=False)
    root = logging.getLogger()
    tree = logging.getLogger("spark_statestore")
    handlers, root_level, tree_level = list(root.handlers), root.level, tree.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(root_level)
    tree.setLevel(tree_level)
    logging.captureWarnings(False)


# -- the JSON formatter ------------------------------------------------------------------------
def test_a_json_line_has_time_level_logger_and_the_merged_message() -> None:
    line = JsonFormatter().format(_record("applied %d records to %s", 3, "s"))
    assert "\n" not in line
    parsed = json.loads(line)
    assert list(parsed) == ["time", "level", "logger", "message"]
    assert parsed["level"] == "WARNING"
    assert parsed["logger"] == "spark_statestore.test"
    assert parsed["message"] == "applied 3 records to s"
    assert parsed["time"].endswith("Z")
    moment = datetime.datetime.fromisoformat(parsed["time"].replace("Z", "+00:00"))
    assert moment.utcoffset() == datetime.timedelta(0)
    assert abs(moment.timestamp() - time.time()) < 60


def test_extra_fields_are_fields_of_the_line() -> None:
    line = JsonFormatter({"process": "store host", "pid": 7}).format(
        _record(
            "lag", store="/s", topic="app-changelog", partition=2, path=Path("/p"), pid=8, time=1
        )
    )
    parsed = json.loads(line)
    assert parsed["store"] == "/s" and parsed["topic"] == "app-changelog"
    assert parsed["partition"] == 2
    assert parsed["path"] == "/p"  # what JSON cannot hold, as its str
    assert parsed["process"] == "store host" and parsed["pid"] == 8  # the record's own wins
    assert parsed["extra_time"] == 1 and parsed["time"].endswith("Z")  # ours kept


def test_an_exception_is_its_type_and_its_traceback_on_the_same_line() -> None:
    line = JsonFormatter().format(_record("failed", exc=True))
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["exc_type"] == "spark_statestore.errors.OptionError"
    assert parsed["exc"].startswith("Traceback (most recent call last):")
    assert parsed["exc"].endswith("OptionError: bad\nvalue")


def test_non_ascii_and_line_breaks_stay_one_valid_line() -> None:
    message = "caf\u00e9 \u6771\u4eac \u2713\nsecond line\r\nthird\u2028fourth"
    line = JsonFormatter().format(_record(message))
    assert line.isascii()
    assert len(line.splitlines()) == 1
    assert json.loads(line)["message"] == message


# -- choosing format and level -----------------------------------------------------------------
def test_the_format_is_the_argument_else_the_variable_else_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(LOG_FORMAT_ENV, raising=False)
    assert log_format() == "text"
    monkeypatch.setenv(LOG_FORMAT_ENV, "JSON")
    assert log_format() == "json"
    assert log_format("text") == "text"  # the flag wins
    monkeypatch.setenv(LOG_LEVEL_ENV, "info")
    assert log_level() == logging.INFO
    assert log_level(logging.DEBUG) == logging.DEBUG
    monkeypatch.delenv(LOG_LEVEL_ENV)
    assert log_level(default=logging.ERROR) == logging.ERROR


def test_an_invalid_value_names_its_variable_and_the_choices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(LOG_FORMAT_ENV, "jsn")
    with pytest.raises(OptionError) as bad_format:
        log_format()
    assert str(bad_format.value) == (
        "environment variable SPARK_STATESTORE_LOG_FORMAT='jsn' is not a log format; did you "
        "mean 'json'? (valid values: text, json)"
    )
    monkeypatch.setenv(LOG_LEVEL_ENV, "loud")
    with pytest.raises(OptionError, match=r"SPARK_STATESTORE_LOG_LEVEL='loud' is not a log "):
        log_level()
    with pytest.raises(OptionError, match=r"DEBUG, INFO, WARNING, ERROR, CRITICAL\)$"):
        log_level()
    with pytest.raises(OptionError, match=r"^log format 'xml' is not a log format"):
        log_format("xml")


def test_json_lines_for_the_tree_at_its_level_and_others_at_warning(
    clean_logging: None,
) -> None:
    out = io.StringIO()
    handler = configure_logging("debug", "json", stream=out, force=True)
    assert handler is not None
    logging.getLogger("spark_statestore.follower.engine").debug("restoring %s", "t")
    logging.getLogger("py4j.clientserver").info("not shown")
    logging.getLogger("py4j.clientserver").warning("shown")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(line["logger"], line["level"], line["message"]) for line in lines] == [
        ("spark_statestore.follower.engine", "DEBUG", "restoring t"),
        ("py4j.clientserver", "WARNING", "shown"),
    ]


def test_a_second_call_replaces_the_first_handler_and_names_the_process(
    clean_logging: None,
) -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging(logging.INFO, "json", stream=first, force=True)
    configure_logging(logging.INFO, "text", stream=second, force=True, process="store host")
    logging.getLogger("spark_statestore.serve").info("serving")
    assert first.getvalue() == ""
    text = second.getvalue()
    assert text.endswith(f"INFO spark_statestore.serve (store host {os.getpid()}): serving\n")
    assert sum(type(h).__name__ == "_Handler" for h in logging.getLogger().handlers) == 1


def test_a_process_whose_logging_is_configured_is_left_alone(clean_logging: None) -> None:
    """As logging.basicConfig: an embedding program's (here pytest's) handlers stay the only
    ones, and the tree's level is not touched."""
    root = logging.getLogger()
    foreign = logging.StreamHandler(io.StringIO())
    root.addHandler(foreign)
    level = logging.getLogger("spark_statestore").level
    assert configure_logging(logging.DEBUG, "json") is None
    assert foreign in root.handlers and not any(
        type(h).__name__ == "_Handler" for h in root.handlers
    )
    assert logging.getLogger("spark_statestore").level == level


def test_the_cli_reports_an_expected_failure_as_one_json_record() -> None:
    """``--log-format json``: the command's one error line is a JSON record too (no
    traceback); an invalid $SPARK_STATESTORE_LOG_FORMAT is the command's error, one line."""
    command = [sys.executable, "-m", "spark_statestore.cli", "--log-format", "json", "inspect"]
    done = subprocess.run(
        [*command, "/nonexistent/store"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60
    )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    parsed = json.loads(line)
    assert parsed["level"] == "ERROR" and parsed["command"] == "inspect"
    assert parsed["message"].startswith("spark-statestore inspect: error: no store at ")
    assert "exc" not in parsed and "Traceback" not in done.stderr
    env = {**os.environ, LOG_FORMAT_ENV: "yaml"}
    bad = subprocess.run(
        [sys.executable, "-m", "spark_statestore.cli", "inspect", "/nonexistent/store"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=60,
    )
    assert bad.returncode == 2
    assert bad.stderr == (
        "spark-statestore inspect: error: environment variable SPARK_STATESTORE_LOG_FORMAT="
        "'yaml' is not a log format (valid values: text, json)\n"
    )


# -- librdkafka's lines ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("facility", "text"),
    [
        ("FAIL", _REFUSED),
        ("FAIL", "b:9092/1: Disconnected (after 5012ms in state UP)"),
        ("FAIL", "b:9092/1: Disconnected: connection closed by peer: receive 0 after POLLIN"),
        ("FAIL", "b:9092/1: Receive failed: Connection reset by peer"),
        ("FAIL", "b:9092/bootstrap: Failed to resolve 'b:9092': Name or service not known"),
        ("ERROR", "rdkafka#consumer-1: 1/1 brokers are down"),
        ("METADATA", "Metadata request failed: Local: Broker transport failure"),
    ],
)
def test_a_lost_or_refused_broker_connection_is_debug(facility: str, text: str) -> None:
    assert kafka_logs.librdkafka_level(logging.ERROR, facility, text) == logging.DEBUG


@pytest.mark.parametrize(
    ("level", "facility", "text"),
    [
        (logging.ERROR, "FAIL", "b:9093/1: SSL handshake failed: certificate verify failed"),
        (logging.ERROR, "FAIL", "b:9094/1: SASL authentication error: Authentication failed"),
        (logging.WARNING, "CONFWARN", "Configuration property x is a consumer property"),
        (logging.ERROR, "TXNERR", "Current transaction failed in state InTransaction"),
        (logging.INFO, "REQTMOUT", "b:9092/1: Timed out 1 in-flight requests"),
    ],
)
def test_other_lines_keep_their_level(level: int, facility: str, text: str) -> None:
    assert kafka_logs.librdkafka_level(level, facility, text) == level


def test_a_line_is_logged_under_the_librdkafka_logger_with_its_facility() -> None:
    target = logging.getLogger("spark_statestore.test.librdkafka")
    seen: list[logging.LogRecord] = []
    handler = _Collect(seen)
    target.addHandler(handler)
    target.setLevel(logging.DEBUG)
    try:
        log = kafka_logs.LibrdkafkaLog(target)
        # As confluent-kafka calls it (its log_cb): the facility, the client's name, the text.
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", _REFUSED)
        log.log(logging.WARNING, "%s [%s] %s", "CONFWARN", "rdkafka#producer-2", "ignored")
    finally:
        target.removeHandler(handler)
        target.setLevel(logging.NOTSET)
    assert [(r.levelno, r.getMessage()) for r in seen] == [
        (logging.DEBUG, f"FAIL [rdkafka#consumer-1] {_REFUSED}"),
        (logging.WARNING, "CONFWARN [rdkafka#producer-2] ignored"),
    ]
    assert (seen[0].facility, seen[0].client) == ("FAIL", "rdkafka#consumer-1")  # type: ignore[attr-defined]


class _Collect(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]) -> None:
        super().__init__(logging.DEBUG)
        self.into = into
        self.arrived = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)
        self.arrived.set()


def test_our_clients_route_librdkafka_lines_through_python_logging() -> None:
    """A consumer of a port nobody listens on: librdkafka's "Connection refused" lines reach
    the spark_statestore.connectors.kafka.logs logger at DEBUG (served by poll), none reach
    stderr on their own."""
    target = logging.getLogger(kafka_logs.LOGGER_NAME)
    seen: list[logging.LogRecord] = []
    handler = _Collect(seen)
    target.addHandler(handler)
    level = target.level
    target.setLevel(logging.DEBUG)
    consumer = clients.consumer(_NOWHERE, None, group="g", what="changelog 'c'")
    try:
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            consumer.poll(0.1)
    finally:
        consumer.close()
        target.removeHandler(handler)
        target.setLevel(level)
    assert seen, "no librdkafka line reached Python logging within 30 s"
    refused = [r for r in seen if "Connect to ipv4#127.0.0.1:1 failed" in r.getMessage()]
    assert refused and all(r.levelno == logging.DEBUG for r in refused)
    assert refused[0].facility == "FAIL"  # type: ignore[attr-defined]


def test_clients_nobody_polls_keep_librdkafka_quiet_and_the_users_settings_win() -> None:
    consumer = clients.consumer(_NOWHERE, None, group="g", what="w")
    producer = clients.producer(_NOWHERE, None, what="w")
    quiet = clients.consumer(_NOWHERE, None, group="g", what="w", quiet=True)
    try:
        for routed in (consumer, producer):
            settings = routed.kafka_settings  # type: ignore[attr-defined]
            assert isinstance(settings["logger"], kafka_logs.LibrdkafkaLog)
            assert "log_level" not in settings
        settings = quiet.kafka_settings  # type: ignore[attr-defined]
        assert "logger" not in settings and settings["log_level"] == kafka_logs.QUIET_LOG_LEVEL
    finally:
        consumer.close()
        quiet.close()
    own = logging.getLogger("mine")
    assert kafka_logs.routed({"logger": own})["logger"] is own
    assert kafka_logs.quiet({"log_level": 7}) == {"log_level": 7}
    assert kafka_logs.quiet({"logger": own}) == {"logger": own}
    # The compiled extension's clients have no log callback: quiet, unless the user says.
    assert native_settings({"bootstrap.servers": "b"}) == {
        "bootstrap.servers": "b",
        "log_level": "2",
    }
    assert native_settings({"log_level": 6}) == {"log_level": "6"}
    assert native_settings({"logger": own}) is None  # a logger needs confluent-kafka's client


def test_an_admin_client_is_quiet() -> None:
    """Nothing polls an AdminClient: its lines could never reach Python logging. Run as a
    child process: with librdkafka's own printing it would write "Connect to" lines to
    stderr while its request waits."""
    code = (
        "from spark_statestore.connectors.kafka import clients\n"
        "from confluent_kafka import KafkaException\n"
        "admin = clients.admin('127.0.0.1:1', None)\n"
        "try:\n"
        "    admin.list_topics(timeout=1.5)\n"
        "except KafkaException:\n"
        "    print('failed')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60
    )
    assert done.stdout == "failed\n"
    assert done.stderr == ""
