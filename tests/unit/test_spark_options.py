"""Option parsing of the Spark data source (no JVM: only pyspark's Python modules)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.connectors.spark.follower.source import rate_limit
from spark_statestore.connectors.spark.option_table import OPTIONS, OptionReader, Surface
from spark_statestore.connectors.spark.options import (
    DecodeMode,
    StoreType,
    View,
    parse_reader_options,
    parse_sink_options,
    parse_source_options,
)
from spark_statestore.errors import OptionError
from spark_statestore.position import Position

BASE = {"path": "/tmp/s", "kafka.bootstrap.servers": "b:9092", "changelog": "app-s-changelog"}


def source(**extra: str) -> Any:
    return parse_source_options({**BASE, **{k.lower(): v for k, v in extra.items()}})


def test_defaults() -> None:
    options = parse_source_options(BASE)
    assert options.path == "/tmp/s" and options.bootstrap_servers == "b:9092"
    assert options.starting_offsets.kind == "earliest"
    assert options.max_offsets_per_trigger is None and options.fail_on_data_loss is True
    assert options.partitions is None and options.key_prefix is None
    assert options.store_type is StoreType.KEY_VALUE
    assert options.formats.key_format == "binary" and options.formats.mode is DecodeMode.FAILFAST
    assert options.kafka == {}


def test_values_are_parsed_once() -> None:
    options = source(
        startingOffsets='{"app-s-changelog": {"0": 5, "1": -2}}',
        maxOffsetsPerTrigger="100",
        failOnDataLoss="FALSE",
        partitions="0,2-3",
        keyPrefix="hex:6b31",
        storeType="Window",
        valueFormat="json",
        valueSchema="id INT, name STRING",
        mode="permissive",
        **{"kafka.fetch.max.bytes": "1000"},
    )
    assert options.starting_offsets.kind == "json"  # type: ignore[attr-defined]
    assert dict(options.starting_offsets.offsets) == {0: 5, 1: -2}  # type: ignore[attr-defined]
    assert options.max_offsets_per_trigger == 100  # type: ignore[attr-defined]
    assert options.fail_on_data_loss is False  # type: ignore[attr-defined]
    assert options.partitions == (0, 2, 3)  # type: ignore[attr-defined]
    assert options.key_prefix == b"k1"  # type: ignore[attr-defined]
    assert options.store_type is StoreType.WINDOW  # type: ignore[attr-defined]
    assert options.kafka == {"fetch.max.bytes": "1000"}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"startingOffset": "latest"}, "did you mean 'startingOffsets'"),
        ({"maxOffsetsPerTrigger": "0"}, "'maxOffsetsPerTrigger' must be an integer >= 1"),
        ({"maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger"),
        ({"failOnDataLoss": "yes"}, "'failOnDataLoss' must be 'true' or 'false'"),
        ({"startingOffsets": "{oops"}, "startingOffsets"),
        ({"startingOffsets": '{"0": -3}'}, "startingOffsets"),
        ({"partitions": "0,x"}, "partitions"),
        ({"storeType": "windowed"}, "did you mean 'window'"),
        ({"valueFormat": "strng"}, "valueFormat"),
        ({"valueFormat": "json"}, "valueSchema"),
        ({"valueSchema": "id INT"}, "valueSchema"),
        ({"kafka.group.id": "g"}, "kafka.group.id"),
        ({"kafka.isolation.level": "read_uncommitted"}, "read_committed"),
        ({"keyPrefix": "hex:zz"}, "keyPrefix"),
        ({"onMissingPosition": "ignore"}, "onMissingPosition"),
    ],
)
def test_bad_options_name_the_option(extra: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        source(**extra)


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("path", "'path' is required"),
        ("kafka.bootstrap.servers", "kafka.bootstrap.servers"),
        ("changelog", "'changelog' is required"),
    ],
)
def test_required_options(missing: str, message: str) -> None:
    raw = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(OptionError, match=message):
        parse_source_options(raw)


def test_reader_options() -> None:
    options = parse_reader_options(
        {"path": "/tmp/s", "view": "LAG", "positionbound": '{"orders": {"0": 4}}', "maxlag": "0"}
    )
    assert options.view is View.LAG and options.max_lag == 0
    assert options.position_bound.position == Position.from_map({"orders": {0: 4}})
    with pytest.raises(OptionError, match="did you mean 'positionBound'"):
        parse_reader_options({"path": "/tmp/s", "positionbounds": "{}"})
    with pytest.raises(OptionError, match="positionBound"):
        parse_reader_options({"path": "/tmp/s", "positionbound": '{"orders": {"0": -4}}'})
    with pytest.raises(OptionError, match="unknown option 'changelog'"):
        parse_reader_options({"path": "/tmp/s", "changelog": "t"})


def test_position_bound_timeout() -> None:
    bound = '{"orders": {"0": 4}}'
    assert parse_reader_options({"path": "/s"}).position_bound_timeout_s == 0
    waits = parse_reader_options(
        {"path": "/s", "positionbound": bound, "positionboundtimeoutms": "2500"}
    )
    assert waits.position_bound_timeout_s == 2.5
    for bad, match in (
        ("-1", "'positionBoundTimeoutMs' must be"),
        ("soon", "'positionBoundTimeoutMs' must be"),
        ("600001", "at most 600000"),
    ):
        with pytest.raises(OptionError, match=match):
            parse_reader_options(
                {"path": "/s", "positionbound": bound, "positionboundtimeoutms": bad}
            )
    with pytest.raises(OptionError, match="set positionBound too"):
        parse_reader_options({"path": "/s", "positionboundtimeoutms": "10"})


def test_rate_limit_prorates_by_backlog_and_always_progresses() -> None:
    start = {0: 0, 1: 100, 2: 5}
    end = {0: 90, 1: 110, 2: 5}
    limited = rate_limit(start, end, 10)
    assert sum(limited[p] - start[p] for p in start) == 10
    assert limited[0] - start[0] == 9 and limited[1] - start[1] == 1 and limited[2] == 5
    assert rate_limit(start, end, 1000) == end
    assert sum(rate_limit({0: 0, 1: 0}, {0: 1, 1: 1}, 1).values()) == 1


def test_the_sink_accepts_the_options_spark_passes_itself() -> None:
    options = parse_sink_options(
        {"path": "/tmp/s", "checkpointlocation": "/tmp/cp", "queryname": "orders"}, streaming=True
    )
    assert options.path == "/tmp/s" and options.checkpoint_location == "/tmp/cp"


def test_a_sink_without_registry_options_does_not_load_the_registry_client() -> None:
    """The registry client's modules took ~0.2 s to import in the planning process and again
    in each query's commit process, for sinks that never use a registry."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from spark_statestore.connectors.spark.options import parse_sink_options\n"
        "parse_sink_options({'path': '/tmp/s', 'checkpointlocation': '/tmp/cp', "
        "'kafka.bootstrap.servers': 'b:9092', 'changelog': 'app-s-changelog', "
        "'application.id': 'app'}, streaming=True)\n"
        "print(sorted(m for m in sys.modules if 'schema_registry' in m))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
    with pytest.raises(OptionError, match="valueSchema is for a registry valueFormat"):
        sink(valueSchema='"string"')


def test_on_missing_position_is_carried_as_the_engine_enum() -> None:
    assert source().on_missing_position is OnMissingPosition.FAIL  # type: ignore[attr-defined]
    skip = source(onMissingPosition="SKIP")
    assert skip.on_missing_position is OnMissingPosition.SKIP  # type: ignore[attr-defined]
    with pytest.raises(OptionError, match=r"unknown value 'error' \(valid values: fail, skip\)"):
        source(onMissingPosition="error")


def test_a_misspelled_option_suggests_the_documented_spelling() -> None:
    # Before, the sink suggested 'queryname' (missing from the spelling table) and listed it so.
    with pytest.raises(OptionError) as caught:
        sink(queryNme="orders")
    message = str(caught.value)
    assert "unknown option 'querynme' for the spark_statestore batch writer" in message
    assert "did you mean 'queryName'?" in message and "checkpointLocation, queryName," in message
    with pytest.raises(OptionError, match="did you mean 'keyValue'"):
        source(storeType="keyvalu")  # enum values are suggested as documented too


@pytest.mark.parametrize("surface", list(Surface))
def test_every_declared_option_is_known_to_its_surfaces_only(surface: Surface) -> None:
    for spec in OPTIONS:
        raw = {spec.name.lower(): "x"}
        if surface in spec.surfaces:
            OptionReader(raw, surface)  # no "unknown option"
        else:
            with pytest.raises(OptionError, match=f"unknown option '{re.escape(spec.key)}'"):
                OptionReader(raw, surface)


def test_required_options_say_what_they_are_for() -> None:
    with pytest.raises(
        OptionError, match="'checkpointLocation' is required for the spark_statestore sink: Spark"
    ):
        parse_sink_options({"path": "/s"}, streaming=True)
    assert parse_sink_options({"path": "/s"}, streaming=False).checkpoint_location is None


def test_serving_beyond_loopback_needs_tls() -> None:
    assert source(serveHost="127.0.0.1").serve_tls_cert is None
    with pytest.raises(OptionError, match=r"'serveHost' '0\.0\.0\.0' is beyond loopback"):
        source(serveHost="0.0.0.0")
    with pytest.raises(OptionError, match="'serveTlsCert' and 'serveTlsKey' go together"):
        source(serveTlsCert="/c.pem")
    options = source(serveHost="0.0.0.0", serveTlsCert="/c.pem", serveTlsKey="/k.pem")
    assert (options.serve_tls_cert, options.serve_tls_key) == ("/c.pem", "/k.pem")


def test_serve_token_file_is_read_and_checked_naming_the_option(tmp_path: Any) -> None:
    assert source().serve_token_file is None  # the server draws a random token
    token = tmp_path / "token"
    token.write_text("  the-replicas-shared-token\n")
    options = source(serveTokenFile=str(token))
    assert options.serve_token_file == str(token)
    assert "shared-token" not in repr(options)  # the plan carries the file, not the secret
    with pytest.raises(OptionError, match=rf"option 'serveTokenFile': cannot read {tmp_path}/no"):
        source(serveTokenFile=str(tmp_path / "no"))
    (tmp_path / "empty").write_text(" \n")
    with pytest.raises(OptionError, match=r"option 'serveTokenFile': .*/empty is empty"):
        source(serveTokenFile=str(tmp_path / "empty"))
    for bad in ("short", "has a space in the middle", "ünicode-token-of-the-replicas"):
        token.write_text(bad)
        with pytest.raises(OptionError, match=rf"option 'serveTokenFile': the token in {token}"):
            source(serveTokenFile=str(token))


def test_serve_tls_client_ca_is_mutual_tls_and_needs_tls(pki: Any, tmp_path: Any) -> None:
    tls = {"serveTlsCert": pki.file("server"), "serveTlsKey": pki.file("server_key")}
    options = source(serveTlsClientCa=pki.file("ca"), **tls)
    assert options.serve_tls_client_ca == pki.file("ca")
    assert source(**tls).serve_tls_client_ca is None
    with pytest.raises(OptionError, match=r"'serveTlsClientCa' \(mutual TLS\) needs TLS"):
        source(serveTlsClientCa=pki.file("ca"))
    missing = tmp_path / "no-ca.pem"
    with pytest.raises(OptionError, match=rf"option 'serveTlsClientCa': cannot read {missing}"):
        source(serveTlsClientCa=str(missing), **tls)
    with pytest.raises(OptionError, match=r"option 'serveTlsClientCa': not PEM certificates"):
        source(serveTlsClientCa=pki.file("client_key"), **tls)
    with pytest.raises(OptionError, match="'serveTlsClientCa' configures the sink's store"):
        sink(serveTlsClientCa=pki.file("ca"))
    served = sink(serve="true", serveTlsClientCa=pki.file("ca"), **tls)
    assert served.serve.tls_client_ca == pki.file("ca")  # type: ignore[attr-defined]


# -- malformed input is a clear error naming the option ------------------------------------
SINK = {"path": "/tmp/s"}


def sink(**extra: str) -> object:
    return parse_sink_options({**SINK, **{k.lower(): v for k, v in extra.items()}}, streaming=False)


def test_a_sink_serves_its_store_only_when_asked() -> None:
    assert sink().serve is None  # type: ignore[attr-defined]
    with pytest.raises(OptionError, match="'servePort' configures the sink's store server"):
        sink(servePort="9000")
    with pytest.raises(OptionError, match="'announce' configures the sink's store server"):
        sink(announce="false")
    served = sink(serve="true", servePort="9000", announceIntervalMs="250")
    settings = served.serve  # type: ignore[attr-defined]
    # No serveHost: the server decides where it listens, from where executors run.
    assert (settings.host, settings.port, settings.announce) == (None, 9000, True)
    assert settings.announce_interval_ms == 250
    assert sink(serve="true", serveHost="127.0.0.2").serve.host == "127.0.0.2"  # type: ignore[attr-defined]
    with pytest.raises(OptionError, match=r"'serveHost' '0\.0\.0\.0' is beyond loopback"):
        sink(serve="true", serveHost="0.0.0.0")
    # The sink's store server parses the options as given again.
    assert served.raw["serveport"] == "9000"  # type: ignore[attr-defined]


def test_the_sink_store_servers_liveness_and_idle_timeouts() -> None:
    served = sink(serve="true")
    assert served.serve_liveness_timeout_ms == 30000  # type: ignore[attr-defined]
    assert served.serve_idle_timeout_ms == 600000  # type: ignore[attr-defined]
    tuned = sink(serve="true", serveLivenessTimeoutMs="5000", serveIdleTimeoutMs="0")
    assert tuned.serve_liveness_timeout_ms == 5000  # type: ignore[attr-defined]
    assert tuned.serve_idle_timeout_ms == 0  # type: ignore[attr-defined]  # never idles out
    for name in ("serveLivenessTimeoutMs", "serveIdleTimeoutMs"):
        with pytest.raises(OptionError, match=f"'{name}' configures the sink's store server"):
            sink(**{name: "5000"})
    with pytest.raises(OptionError, match=r"'serveLivenessTimeoutMs'.*1000"):
        sink(serve="true", serveLivenessTimeoutMs="10")  # a busy server would pass for hung
    with pytest.raises(OptionError, match="'serveIdleTimeoutMs'"):
        sink(serve="true", serveIdleTimeoutMs="-1")


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        '{"app-s-changelog": ' * 50_000,
        '{"t": {"0": ' + "[" * 5_000 + "1" + "]" * 5_000 + "}}",
        '{"t": {"0": {"deeper": 1}}}',
    ],
)
def test_deeply_nested_starting_offsets_name_the_option(text: str) -> None:
    with pytest.raises(OptionError, match="option 'startingOffsets'"):
        source(startingOffsets=text)


@pytest.mark.parametrize("option", ["valueSchema", "keySchema"])
def test_deeply_nested_schemas_name_the_option(option: str) -> None:
    from spark_statestore.connectors.spark.ddl import MAX_DDL_DEPTH

    fmt = "keyFormat" if option == "keySchema" else "valueFormat"
    for depth in (MAX_DDL_DEPTH + 1, 3_000):
        for opened, closed in (("ARRAY<", ">"), ("STRUCT<a: ", ">"), ("MAP<STRING, ", ">")):
            schema = "a " + opened * depth + "INT" + closed * depth
            with pytest.raises(OptionError, match=f"option {option}: .*nested deeper than"):
                source(**{fmt: "json", option: schema})
    fine = "a " + "ARRAY<" * MAX_DDL_DEPTH + "INT" + ">" * MAX_DDL_DEPTH
    assert source(**{fmt: "json", option: fine}).formats is not None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("txn_app_id", "rule"),
    [
        ("orders\x00agg", "contains a NUL character"),
        ("x" * 256, "is 256 bytes long in UTF-8, more than 255"),
        ("é" * 128, "is 256 bytes long in UTF-8, more than 255"),
        ("orders/agg", "contains a path separator"),
        (".orders", "starts with '.'"),
        ("orders\ud800", "is not valid Unicode"),
    ],
)
def test_txn_app_id_that_cannot_name_a_directory_is_refused_at_parse_time(
    txn_app_id: str, rule: str
) -> None:
    with pytest.raises(OptionError, match=rf"option 'txnAppId' .*{re.escape(rule)}"):
        sink(txnAppId=txn_app_id, txnVersion="3")
    assert sink(txnAppId="x" * 255, txnVersion="3").txn_app_id == "x" * 255  # type: ignore[attr-defined]


NOT_ASCII_INTEGERS = ["\u0663", "\uff13", "\u00b2", "+3", "3_0", "3.0", "0x3", "-"]


@pytest.mark.parametrize("text", NOT_ASCII_INTEGERS)
def test_integer_options_take_ascii_digits_only(text: str) -> None:
    for surface, name in (
        (source, "maxOffsetsPerTrigger"),
        (source, "servePort"),
        (sink, "txnVersion"),
        (sink, "uncommitted.max.bytes"),
    ):
        extra = {name: text, "txnAppId": "a"} if name == "txnVersion" else {name: text}
        with pytest.raises(OptionError, match=f"option '{re.escape(name)}' must be an integer"):
            surface(**extra)
    for name in ("maxLag", "positionBoundTimeoutMs"):
        raw = {"path": "/s", "positionbound": '{"t": {"0": 1}}', name.lower(): text}
        with pytest.raises(OptionError, match=f"option '{name}' must be an integer"):
            parse_reader_options(raw)


@pytest.mark.parametrize("partition", ["\u0663", "\uff13", "\u00b2", "+3", " 3", "3 "])
def test_starting_offsets_partitions_take_ascii_digits_only(partition: str) -> None:
    text = json.dumps({"app-s-changelog": {partition: 5}})
    with pytest.raises(OptionError, match="option 'startingOffsets': entry"):
        source(startingOffsets=text)


def test_integer_options_beyond_their_range_are_refused() -> None:
    with pytest.raises(OptionError, match=r"'servePort' must be an integer >= 0 and <= 65535"):
        source(servePort="65536")
    with pytest.raises(OptionError, match="<= 9223372036854775807"):
        source(maxOffsetsPerTrigger=str(2**63))
    with pytest.raises(OptionError, match="<= 9223372036854775807"):
        source(maxOffsetsPerTrigger="9" * 10_000)  # more digits than int() takes
    for entries in ({"0": 2**63}, {"2147483648": 1}, {"0": 1, "00": 2}):
        with pytest.raises(OptionError, match="option 'startingOffsets': entry"):
            source(startingOffsets=json.dumps(entries))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("keyPrefix", "user-\ud800"),
        ("keyFrom", "\udcff"),
        ("changelog", "app-\ud800-changelog"),
        ("kafka.client.id", "me\ud800"),
        ("kafka.client\ud800", "me"),
    ],
)
def test_option_text_that_is_not_unicode_names_the_option(name: str, value: str) -> None:
    with pytest.raises(OptionError, match=r"is not valid Unicode text: it holds a lone surrogate"):
        if name == "keyFrom":  # a reader option
            parse_reader_options({"path": "/s", "keyformat": "string", name.lower(): value})
        else:
            source(**{name: value})


@pytest.mark.parametrize("name", ["path", "serveTlsCert", "kafka.client.id"])
def test_a_nul_in_a_file_name_or_a_kafka_setting_is_refused(name: str) -> None:
    raw = {**BASE, "serveTlsKey": "/k.pem", "serveTlsCert": "/c.pem", name: "a\x00b"}
    with pytest.raises(
        OptionError, match=f"option '{name}' contains a NUL character at character 1"
    ):
        parse_source_options({k.lower(): v for k, v in raw.items()})
    with pytest.raises(OptionError, match="option 'checkpointLocation' contains a NUL"):
        sink(checkpointLocation="/cp\x00")


BAD_KAFKA_NAMES = ["orders changelog", "orders/changelog", "ördèrs", ".", "..", "x" * 250, "a:b"]


@pytest.mark.parametrize("name", BAD_KAFKA_NAMES)
def test_a_changelog_that_kafka_cannot_name_is_refused(name: str) -> None:
    # Before, the follower and the sink took any text and failed later in librdkafka.
    with pytest.raises(OptionError, match=r"option 'changelog' .* not a valid Kafka topic"):
        source(changelog=name)
    with pytest.raises(OptionError, match=r"option 'changelog' .* not a valid Kafka topic"):
        sink(**{"changelog": name, "kafka.bootstrap.servers": "b:9092", "application.id": "a"})


@pytest.mark.parametrize("name", BAD_KAFKA_NAMES)
def test_an_application_id_that_kafka_cannot_use_is_refused(name: str) -> None:
    extra = {"changelog": "app-s-changelog", "kafka.bootstrap.servers": "b:9092"}
    with pytest.raises(OptionError, match=r"option 'application\.id' .* not a valid Kafka"):
        sink(**extra, **{"application.id": name})


@pytest.mark.parametrize("name", ["app-s-changelog", "A.b_c-9", "x" * 249])
def test_legal_kafka_names_are_taken(name: str) -> None:
    assert source(changelog=name).changelog == name  # type: ignore[attr-defined]


def test_leader_application_id_is_a_kafka_name_for_a_whole_follower() -> None:
    options = parse_source_options({**BASE, "leaderapplicationid": "orders-app"})
    assert options.leader_application_id == "orders-app"
    assert parse_source_options(BASE).leader_application_id is None
    with pytest.raises(OptionError, match=r"leaderApplicationId.*not a valid Kafka"):
        source(leaderApplicationId="orders app")
    with pytest.raises(OptionError, match=r"leaderApplicationId.*every partition"):
        source(leaderApplicationId="orders-app", partitions="0")


REGROUP_TOPOLOGY = (Path(__file__).parent / "topologies" / "regroup.txt").read_text()


def test_the_leaders_topology_or_upstream_topics_narrow_its_wait() -> None:
    options = source(
        leaderApplicationId="app", leaderTopology=REGROUP_TOPOLOGY.replace("regroup]", "s]")
    )
    assert options.leader_topology is not None
    options = source(leaderApplicationId="app", leaderUpstreamTopics=" app-a-repartition, app-b ")
    assert options.leader_upstream_topics == ("app-a-repartition", "app-b")
    with pytest.raises(OptionError, match=r"leaderUpstreamTopics.*empty"):
        source(leaderApplicationId="app", leaderUpstreamTopics=" , ")
    with pytest.raises(OptionError, match=r"'leaderTopology' narrows.*set 'leaderApplicationId'"):
        source(leaderTopology=REGROUP_TOPOLOGY)
    with pytest.raises(OptionError, match=r"'leaderUpstreamTopics' narrows"):
        source(leaderUpstreamTopics="x")
    with pytest.raises(OptionError, match=r"say the same thing"):
        source(leaderApplicationId="app", leaderTopology=REGROUP_TOPOLOGY, leaderUpstreamTopics="x")
    # The changelog app-s-changelog is store 's': the description must have it.
    with pytest.raises(OptionError, match=r"'leaderTopology': the topology has no store 's'"):
        source(leaderApplicationId="app", leaderTopology=REGROUP_TOPOLOGY)
    with pytest.raises(OptionError, match=r"'leaderTopology': line 1 "):
        source(leaderApplicationId="app", leaderTopology="not a topology")
    with pytest.raises(OptionError, match=r"not named <application.id>-<store>-changelog"):
        source(leaderApplicationId="other", leaderTopology=REGROUP_TOPOLOGY)


@pytest.mark.parametrize(
    ("text", "millis"),
    [
        ("1700000000000", 1_700_000_000_000),
        ("-5", -5),
        ("2026-11-24T19:00:00Z", 1_795_546_800_000),
        ("2026-11-24T19:00:00.123+01:00", 1_795_543_200_123),
        ("2026-11-24 19:00:00", 1_795_546_800_000),  # no offset: UTC
    ],
)
def test_as_of_timestamp_is_epoch_millis_or_iso_8601(text: str, millis: int) -> None:
    options = parse_reader_options({"path": "/tmp/s", "asoftimestamp": text})
    assert options.lookup.as_of == millis


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"asoftimestamp": "yesterday"}, "neither epoch milliseconds nor an ISO-8601"),
        ({"asoftimestamp": "1" * 30}, "outside Kafka's timestamps"),
        ({"asoftimestamp": "5", "view": "lag"}, "view 'lag' is not read as of a time"),
    ],
)
def test_bad_as_of_timestamps_name_the_option(raw: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=re.escape(message)):
        parse_reader_options({"path": "/tmp/s", **raw})


def test_history_retention_is_for_versioned_stores() -> None:
    assert source(storeType="versioned").history_retention_ms is None  # the changelog's
    assert source(storeType="versioned", historyRetentionMs="60000").history_retention_ms == 60000
    with pytest.raises(OptionError, match="set storeType 'versioned' too"):
        source(historyRetentionMs="60000")


def test_the_follower_announces_itself_every_five_seconds_unless_told_otherwise() -> None:
    options = parse_source_options(BASE)
    assert (options.announce, options.announce_interval_ms) == (True, 5000)
    options = parse_source_options({**BASE, "announce": "false", "announceintervalms": "250"})
    assert (options.announce, options.announce_interval_ms) == (False, 250)
    with pytest.raises(OptionError, match="announceIntervalMs"):
        parse_source_options({**BASE, "announceIntervalMs": "99"})
